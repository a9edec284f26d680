//! The sandbox's writable disk: a sparse ext4 image kept across runs.

use super::*;

/// Size of a sandbox's writable disk when its configuration names none
/// (sparse: only what is written counts).
pub(super) const DATA_DISK_BYTES: u64 = 8 << 30;

/// The size of the sandbox's writable disk: its disk limit. The guest's
/// filesystem fills it (`ENOSPC` inside at the limit); the host's file
/// never grows past it.
pub(super) fn data_disk_bytes(config: &crate::model::SandboxConfig) -> u64 {
    config.disk_mb.map_or(DATA_DISK_BYTES, |mb| mb << 20)
}

/// Formats the sandbox's data disk of `bytes` unless it has one.
pub(super) async fn prepare_data_disk(path: &Path, bytes: u64) -> Result<()> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || ensure_data_disk(&path, bytes))
        .await
        .map_err(|e| Error::io("preparing the data disk", None, std::io::Error::other(e)))?
}

/// Creates the sandbox's writable disk on its first start: a sparse file
/// with an empty ext4 (the agent makes `upper/` and `work/` on it).
pub(super) fn ensure_data_disk(path: &Path, bytes: u64) -> Result<()> {
    if crate::engine::image::ext4::is_ext4(path) {
        return Ok(());
    }
    format_data_disk(path, bytes)
}

/// Formats a new, empty data disk of `bytes` at `path` (put in place by a
/// rename).
pub(super) fn format_data_disk(path: &Path, bytes: u64) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io("creating the disk directory", Some(dir), e))?;
    let tmp = path.with_extension("tmp");
    let file = std::fs::File::create(&tmp)
        .map_err(|e| Error::io("creating the writable disk", Some(&tmp), e))?;
    file.set_len(bytes)
        .map_err(|e| Error::io("sizing the writable disk", Some(&tmp), e))?;
    drop(file);
    let out = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "burrow-data", "-E"])
        .arg("root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1")
        .arg(&tmp)
        .output()
        .map_err(|e| Error::io("running mkfs.ext4 (package e2fsprogs)", None, e))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(
            "formatting the writable disk",
            Some(&tmp),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        ));
    }
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::io("publishing the writable disk", Some(path), e))
}
