//! Boot templates: a microVM booted once to the point where the agent is
//! up, saved, and restored for every matching sandbox instead of booting.
//!
//! A template is a guest of the real kernel and agent booted with
//! `--vm-template` (see "Templates" in [`burrow_protocol::vm`]): it has the
//! sandbox's devices (the image disk, a placeholder data disk of the same
//! size, the agent's port, the network card, as many 9p devices as the
//! sandbox has shares) but nothing of a sandbox mounted, written or set.
//! Once its agent says it is ready, the VM is saved the way `snapshot.rs`
//! does (RAM in a shared file, the device state in a small file beside it)
//! and QEMU ends. A restore maps that RAM file copy-on-write into a new
//! QEMU with the sandbox's own disk, shares and channel, and hands the
//! agent the sandbox's identity, fresh entropy and the time.
//!
//! A template of first starts (`fresh_root` in its inputs) goes further:
//! it is booted with a freshly formatted data disk, which its agent mounts,
//! lays the overlay on and switches to before it says it is ready (see
//! "Templates" in [`burrow_protocol::vm`]). A sandbox's first start (it has
//! no data disk yet) gets a sparse copy of that disk as it was saved, so the
//! restored guest's cached view of its disk is the disk's content, and the
//! guest skips every mount but the shares. Later starts restore the plain
//! template, whose guest mounts the sandbox's own disk. Copies of one disk
//! share its ext4 UUID and hash seed.
//!
//! A template is keyed by everything a restored guest depends on
//! ([`TemplateInputs`]: the image disk, the kernel, the agent and QEMU as
//! files, the acceleration, memory, vCPUs, network and the number of
//! shares): a change to any of them makes a new key, so a stale template is
//! never restored. Templates live in `images/vm-templates/<key>/`, are
//! built under `<key>.lock` by one process while the others wait, are
//! published by a rename (a directory that exists is complete), and are
//! removed by an image prune with their image or when their inputs are
//! gone. A build that fails is remembered for a while (`<key>.failed`), so
//! that every start does not pay for a doomed build; those starts boot
//! cold, saying why.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use burrow_protocol::vm::{VmBoot, VmTemplateReady};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::qemu::{Accel, Machine, MemoryFile, Share, TemplateBoot};
use crate::engine::locks::FileLock;
use crate::error::{Error, Result};

/// Directory of the templates, under the images directory.
pub const TEMPLATES_DIR: &str = "vm-templates";
/// Bumped when a template's layout, boot protocol or devices change (3:
/// the network card's frames go to a socket, not QEMU's user network).
pub(super) const FORMAT: u32 = 3;
/// How long a template guest may take to boot to the agent's word.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a failed build keeps later starts from trying again.
const RETRY_AFTER: Duration = Duration::from_secs(600);
/// The file a complete template directory is described by.
const META: &str = "template.json";

/// A file a template depends on, by identity: a replaced file (a rebuilt
/// kernel or agent, an upgraded QEMU) has another size or modification time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileId {
    /// The file's path.
    pub path: PathBuf,
    /// Its size.
    pub len: u64,
    /// Its modification time, in nanoseconds since the epoch.
    pub mtime_ns: u64,
}

impl FileId {
    /// The identity of the file at `path` now.
    pub fn of(path: &Path) -> Result<FileId> {
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::io("reading a file's identity", Some(path), e))?;
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Ok(FileId {
            path: path.to_path_buf(),
            len: meta.len(),
            mtime_ns,
        })
    }

    /// Whether the file at the path is still this one.
    fn current(&self) -> bool {
        FileId::of(&self.path).is_ok_and(|now| &now == self)
    }
}

/// Everything a restored guest depends on. Two launches with equal inputs
/// restore the same template; any difference gets another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateInputs {
    /// The template layout's version ([`FORMAT`]).
    pub format: u32,
    /// The image disk's cache key (the image digest's hex for pulled
    /// images), by which a prune finds the templates of an image.
    pub image_key: String,
    /// The image's ext4 disk.
    pub image_disk: FileId,
    /// The guest kernel.
    pub kernel: FileId,
    /// The guest agent (the template's `/init`).
    pub agent: FileId,
    /// The QEMU binary.
    pub qemu: FileId,
    /// KVM or TCG.
    pub accel: Accel,
    /// The TSC rate on the kernel command line (TCG).
    pub tsc_khz: Option<u64>,
    /// Guest RAM in MiB.
    pub memory_mb: u64,
    /// vCPUs.
    pub cpus: u32,
    /// The data disk's size (the guest's devices are saved with it). Left
    /// out of the key at the size every template had before it was an
    /// input, so those templates stay good.
    #[serde(
        default = "default_data_disk_bytes",
        skip_serializing_if = "is_default_data_disk_bytes"
    )]
    pub data_disk_bytes: u64,
    /// With a network card.
    pub network: bool,
    /// How many 9p devices.
    pub shares: usize,
    /// A template of first starts: a fresh data disk mounted as the root.
    pub fresh_root: bool,
}

fn default_data_disk_bytes() -> u64 {
    super::DATA_DISK_BYTES
}

fn is_default_data_disk_bytes(bytes: &u64) -> bool {
    *bytes == super::DATA_DISK_BYTES
}

impl TemplateInputs {
    /// The template's key: a digest of the inputs.
    pub fn key(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(&Sha256::digest(&json)[..12])
    }

    /// Whether every file input is still the file it was.
    fn current(&self) -> bool {
        [&self.image_disk, &self.kernel, &self.agent, &self.qemu]
            .iter()
            .all(|f| f.current())
    }
}

/// What `template.json` records.
#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    inputs: TemplateInputs,
    /// When it was built (seconds since the epoch).
    built_at: u64,
    /// How long the template guest took to boot to the agent's word.
    boot_ms: u64,
}

/// A complete template, ready to restore.
#[derive(Debug, Clone)]
pub(super) struct Template {
    pub key: String,
    dir: PathBuf,
}

impl Template {
    /// The guest RAM (mapped copy-on-write by a restore).
    pub fn ram(&self) -> PathBuf {
        self.dir.join("ram")
    }
    /// The device state.
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
    /// The initramfs it booted from (a restore names the same one: QEMU
    /// checks the sizes of what it loaded).
    pub fn initramfs(&self) -> PathBuf {
        self.dir.join("initramfs.cpio")
    }
    /// The data disk it was booted with (a fresh one, in a template of
    /// first starts; a blank placeholder otherwise).
    fn data_disk(&self) -> PathBuf {
        self.dir.join("data.img")
    }

    /// Gives a first start the fresh data disk of this template (of first
    /// starts), as it was saved: a sparse copy at `to`, put in place by a
    /// rename.
    pub fn copy_data_disk(&self, to: &Path) -> Result<()> {
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io("creating the disk directory", Some(dir), e))?;
        }
        let tmp = to.with_extension("copy");
        let copied = crate::engine::image::ext4::copy_sparse(&self.data_disk(), &tmp)
            .and_then(|()| std::fs::rename(&tmp, to));
        copied.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io("copying the template's data disk", Some(to), e)
        })
    }
}

/// What building a template takes, besides its inputs.
pub(super) struct Ingredients<'a> {
    pub qemu: &'a Path,
    pub kernel: &'a Path,
    pub agent: &'a Path,
    pub root_disk: &'a Path,
    /// The template's boot configuration (disks and channel only).
    pub boot: &'a VmBoot,
    /// The size of a data disk.
    pub data_disk_bytes: u64,
}

/// The template directory of `images_dir`.
pub fn templates_dir(images_dir: &Path) -> PathBuf {
    images_dir.join(TEMPLATES_DIR)
}

/// The template for `inputs`, built now if there is none (one builder per
/// key; the others wait for it and use its result).
pub(super) async fn ensure(
    images_dir: &Path,
    inputs: &TemplateInputs,
    with: &Ingredients<'_>,
) -> Result<Template> {
    let root = templates_dir(images_dir);
    let key = inputs.key();
    let template = Template {
        dir: root.join(&key),
        key: key.clone(),
    };
    if template.dir.join(META).is_file() {
        return Ok(template);
    }
    std::fs::create_dir_all(&root)
        .map_err(|e| Error::io("creating the template directory", Some(&root), e))?;
    let failed = root.join(format!("{key}.failed"));
    check_failed(&failed)?;
    let _lock = FileLock::acquire(&root.join(format!("{key}.lock"))).await?;
    // Another process may have built it (or failed to) meanwhile.
    if template.dir.join(META).is_file() {
        return Ok(template);
    }
    check_failed(&failed)?;
    let tmp = root.join(format!(".tmp-{key}-{}", std::process::id()));
    let started = Instant::now();
    tracing::info!(key = %key, memory_mb = inputs.memory_mb, cpus = inputs.cpus, "building a VM boot template");
    match build(&tmp, inputs, with).await {
        Ok(boot_ms) => {
            let meta = Meta {
                inputs: inputs.clone(),
                built_at: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
                boot_ms,
            };
            let published = std::fs::write(
                tmp.join(META),
                serde_json::to_vec_pretty(&meta).unwrap_or_default(),
            )
            .and_then(|()| std::fs::rename(&tmp, &template.dir));
            if let Err(e) = published {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(Error::io("publishing the template", Some(&template.dir), e));
            }
            tracing::info!(
                key = %key,
                boot_ms,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "VM boot template ready"
            );
            Ok(template)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            let _ = std::fs::write(&failed, e.to_string());
            Err(e)
        }
    }
}

/// Refuses to build while a recent build of the key failed.
fn check_failed(failed: &Path) -> Result<()> {
    let Ok(meta) = std::fs::metadata(failed) else {
        return Ok(());
    };
    let age = meta
        .modified()
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or(Duration::MAX);
    if age >= RETRY_AFTER {
        let _ = std::fs::remove_file(failed);
        return Ok(());
    }
    let reason = std::fs::read_to_string(failed).unwrap_or_default();
    Err(super::qemu::unavailable(format!(
        "building this boot template failed {} s ago (tried again after {} s): {reason}",
        age.as_secs(),
        RETRY_AFTER.as_secs()
    )))
}

/// The machine of a template, and of every guest restored from it: only
/// the data disk, the shares' host paths, the channels and how the RAM is
/// mapped differ.
#[allow(clippy::too_many_arguments)]
pub(super) fn machine<'a>(
    kernel: &'a Path,
    initramfs: &'a Path,
    root_disk: &'a Path,
    data_disk: &'a Path,
    inputs: &TemplateInputs,
    shares: &'a [Share],
    ram: &'a Path,
    restoring: bool,
) -> Machine<'a> {
    Machine {
        kernel,
        initramfs,
        root_disk: Some(root_disk),
        data_disk: Some(data_disk),
        accel: inputs.accel,
        cpus: inputs.cpus,
        memory_mb: inputs.memory_mb,
        network: inputs.network,
        shares,
        agent_fd: None,
        net_fd: None,
        qmp_fd: None,
        start_paused: false,
        tsc_khz: inputs.tsc_khz,
        memory_file: Some(MemoryFile {
            path: ram,
            shared: !restoring,
        }),
        incoming: restoring,
        template: Some(if inputs.fresh_root {
            TemplateBoot::Root
        } else {
            TemplateBoot::Image
        }),
        layer: false,
    }
}

/// Boots a template guest in `dir`, waits for its agent's word and saves
/// it. Returns how long the boot took, in ms.
async fn build(dir: &Path, inputs: &TemplateInputs, with: &Ingredients<'_>) -> Result<u64> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("share"))
        .map_err(|e| Error::io("creating the template directory", Some(dir), e))?;
    let template = Template {
        key: String::new(),
        dir: dir.to_path_buf(),
    };
    let agent = std::fs::read(with.agent)
        .map_err(|e| Error::io("reading the guest agent", Some(with.agent), e))?;
    let boot_json = serde_json::to_vec(with.boot)
        .map_err(|e| Error::io("encoding the boot configuration", None, e.into()))?;
    super::initramfs::write(&template.initramfs(), &agent, &boot_json)?;
    let data = template.data_disk();
    if inputs.fresh_root {
        super::format_data_disk(&data, with.data_disk_bytes)?;
    } else {
        std::fs::File::create(&data)
            .and_then(|f| f.set_len(with.data_disk_bytes))
            .map_err(|e| Error::io("creating the template's data disk", Some(&data), e))?;
    }
    let shares: Vec<Share> = (0..inputs.shares)
        .map(|i| Share {
            tag: super::share_tag(i),
            path: dir.join("share"),
            read_only: true,
        })
        .collect();
    let console_path = dir.join("console.log");
    let console = std::fs::File::create(&console_path).map_err(|e| {
        Error::io(
            "creating the template's console log",
            Some(&console_path),
            e,
        )
    })?;
    let (ram, initramfs) = (template.ram(), template.initramfs());
    let machine = machine(
        with.kernel,
        &initramfs,
        with.root_disk,
        &data,
        inputs,
        &shares,
        &ram,
        false,
    );
    let started = Instant::now();
    let mut vm = super::start_qemu(
        with.qemu,
        machine,
        Vec::new(),
        console.into(),
        super::Owner::Builder,
    )
    .await?;
    let ready = tokio::time::timeout(READY_TIMEOUT, read_ready(&mut vm.agent)).await;
    let outcome = match ready {
        Ok(Ok(())) => {
            let boot_ms = started.elapsed().as_millis() as u64;
            vm.qmp
                .save_state(&template.state(), true)
                .await
                .map(|()| boot_ms)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(super::qemu::unavailable(format!(
            "the template guest did not get ready within {} s",
            READY_TIMEOUT.as_secs()
        ))),
    };
    let _ = vm.child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), vm.child.wait()).await;
    outcome.map_err(|e| {
        let tail = console_tail(&console_path);
        if tail.is_empty() {
            e
        } else {
            super::qemu::unavailable(format!("{e}; the template guest's console: {tail}"))
        }
    })
}

/// Reads the template agent's [`VmTemplateReady`] frame.
async fn read_ready(agent: &mut tokio::net::UnixStream) -> Result<()> {
    let gone = |e: std::io::Error| {
        super::qemu::unavailable(format!(
            "the template guest ended before its agent was ready ({e})"
        ))
    };
    let mut header = [0u8; 4];
    agent.read_exact(&mut header).await.map_err(gone)?;
    let len = burrow_protocol::decode_len(header)
        .map_err(|e| super::qemu::unavailable(format!("the template agent's word: {e}")))?;
    let mut body = vec![0u8; len];
    agent.read_exact(&mut body).await.map_err(gone)?;
    let ready: VmTemplateReady = burrow_protocol::decode(&body)
        .map_err(|e| super::qemu::unavailable(format!("the template agent's word: {e}")))?;
    if ready.version != burrow_protocol::PROTOCOL_VERSION {
        return Err(super::qemu::unavailable(format!(
            "the template agent speaks protocol {}, not {}",
            ready.version,
            burrow_protocol::PROTOCOL_VERSION
        )));
    }
    Ok(())
}

/// The last lines of a console log, for an error.
fn console_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Removes the templates of the images whose disk keys are in `image_keys`,
/// the templates whose input files changed or are gone, and leftovers of
/// killed builds; a template being built (its lock held) stays. Returns the
/// templates removed and the bytes freed.
pub fn prune(images_dir: &Path, image_keys: &[String]) -> Result<(u64, u64)> {
    let root = templates_dir(images_dir);
    let listing = match std::fs::read_dir(&root) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(Error::io("listing the VM templates", Some(&root), e)),
    };
    let (mut removed, mut freed) = (0, 0);
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = name
            .strip_prefix(".tmp-")
            .and_then(|rest| rest.split('-').next())
            .unwrap_or(&name)
            .to_owned();
        if name.ends_with(".lock") || name.ends_with(".failed") {
            continue;
        }
        let Some(_lock) = FileLock::try_acquire(&root.join(format!("{key}.lock")))? else {
            continue;
        };
        let doomed = if name.starts_with(".tmp-") {
            true
        } else {
            match std::fs::read(entry.path().join(META))
                .ok()
                .and_then(|b| serde_json::from_slice::<Meta>(&b).ok())
            {
                Some(meta) => image_keys.contains(&meta.inputs.image_key) || !meta.inputs.current(),
                None => true,
            }
        };
        if !doomed {
            continue;
        }
        let path = entry.path();
        freed += crate::engine::image::registry::tree_size(&path);
        std::fs::remove_dir_all(&path)
            .map_err(|e| Error::io("removing a VM template", Some(&path), e))?;
        let _ = std::fs::remove_file(root.join(format!("{key}.failed")));
        if !name.starts_with(".tmp-") {
            removed += 1;
        }
    }
    Ok((removed, freed))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn inputs(dir: &Path) -> TemplateInputs {
        let file = |name: &str| {
            let p = dir.join(name);
            std::fs::write(&p, name).unwrap();
            FileId::of(&p).unwrap()
        };
        TemplateInputs {
            format: FORMAT,
            image_key: "abc".into(),
            image_disk: file("disk"),
            kernel: file("kernel"),
            agent: file("agent"),
            qemu: file("qemu"),
            accel: Accel::Tcg,
            tsc_khz: Some(2_000_000),
            memory_mb: 512,
            cpus: 1,
            data_disk_bytes: super::super::DATA_DISK_BYTES,
            network: false,
            shares: 0,
            fresh_root: false,
        }
    }

    /// The data disk's size is in the key, except at the size templates
    /// were made with before it was an input (their keys stay).
    #[test]
    fn the_data_disk_size_keys_a_template_but_the_old_default_keeps_its_key() {
        let tmp = tempfile::tempdir().unwrap();
        let inputs = inputs(tmp.path());
        let json = serde_json::to_value(&inputs).unwrap();
        assert!(json.get("data_disk_bytes").is_none());
        let small = TemplateInputs {
            data_disk_bytes: 64 << 20,
            ..inputs.clone()
        };
        assert_ne!(small.key(), inputs.key());
        let back: TemplateInputs = serde_json::from_value(json).unwrap();
        assert_eq!(back, inputs);
    }

    /// A sparse copy has the source's bytes and its holes.
    #[test]
    fn a_sparse_copy_is_the_same_file_without_filling_holes() {
        use std::io::{Seek, SeekFrom, Write};
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let (from, to) = (tmp.path().join("from"), tmp.path().join("to"));
        let mut f = std::fs::File::create(&from).unwrap();
        f.set_len(64 << 20).unwrap();
        for (at, byte) in [(0u64, 1u8), (5 << 20, 2), ((64 << 20) - 4096, 3)] {
            f.seek(SeekFrom::Start(at)).unwrap();
            f.write_all(&vec![byte; 4096]).unwrap();
        }
        drop(f);
        crate::engine::image::ext4::copy_sparse(&from, &to).unwrap();
        assert_eq!(std::fs::read(&from).unwrap(), std::fs::read(&to).unwrap());
        let blocks = std::fs::metadata(&to).unwrap().blocks();
        assert!(blocks * 512 < 1 << 20, "holes were filled: {blocks} blocks");
        // A missing source is an error, not an empty disk.
        assert!(crate::engine::image::ext4::copy_sparse(&tmp.path().join("none"), &to).is_err());
    }

    #[test]
    fn every_input_changes_the_key() {
        let tmp = tempfile::tempdir().unwrap();
        let base = inputs(tmp.path());
        let key = base.key();
        assert_eq!(key.len(), 24);
        assert_eq!(key, base.clone().key(), "stable");
        let changes: Vec<fn(&mut TemplateInputs)> = vec![
            |i| i.format += 1,
            |i| i.image_key = "def".into(),
            |i| i.image_disk.len += 1,
            |i| i.kernel.mtime_ns += 1,
            |i| i.agent.path = "/other/agent".into(),
            |i| i.qemu.len += 1,
            |i| i.accel = Accel::Kvm,
            |i| i.tsc_khz = None,
            |i| i.memory_mb = 1024,
            |i| i.cpus = 2,
            |i| i.network = true,
            |i| i.shares = 1,
            |i| i.fresh_root = true,
        ];
        let mut keys = std::collections::BTreeSet::from([key]);
        for change in changes {
            let mut i = base.clone();
            change(&mut i);
            assert!(keys.insert(i.key()), "a changed input keeps the key: {i:?}");
        }
    }

    #[test]
    fn replaced_files_are_noticed() {
        let tmp = tempfile::tempdir().unwrap();
        let i = inputs(tmp.path());
        assert!(i.current());
        std::fs::write(tmp.path().join("kernel"), "a longer kernel").unwrap();
        assert!(!i.current());
        let i = inputs(tmp.path());
        std::fs::remove_file(tmp.path().join("qemu")).unwrap();
        assert!(!i.current());
    }

    #[test]
    fn prune_removes_what_is_stale_and_keeps_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let files = tmp.path().join("files");
        std::fs::create_dir_all(&files).unwrap();
        let images = tmp.path().join("images");
        let root = templates_dir(&images);
        let publish = |i: &TemplateInputs| {
            let dir = root.join(i.key());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("ram"), vec![1u8; 4096]).unwrap();
            let meta = Meta {
                inputs: i.clone(),
                built_at: 0,
                boot_ms: 0,
            };
            std::fs::write(dir.join(META), serde_json::to_vec(&meta).unwrap()).unwrap();
            dir
        };
        let base = inputs(&files);
        let keep = publish(&base);
        let mut other = base.clone();
        other.image_key = "gone".into();
        let of_pruned_image = publish(&other);
        let mut moved = base.clone();
        moved.kernel.path = files.join("no-such-kernel");
        let stale = publish(&moved);
        let leftover = root.join(".tmp-0123-42");
        std::fs::create_dir_all(&leftover).unwrap();
        let broken = root.join("feedbeef");
        std::fs::create_dir_all(&broken).unwrap();

        let (removed, freed) = prune(&images, &["gone".into()]).unwrap();
        assert_eq!(removed, 3);
        assert!(freed >= 2 * 4096);
        assert!(keep.join(META).is_file());
        for gone in [of_pruned_image, stale, leftover, broken] {
            assert!(!gone.exists(), "{} survived", gone.display());
        }
        assert_eq!(prune(&tmp.path().join("nowhere"), &[]).unwrap(), (0, 0));
    }

    #[test]
    fn a_recent_failure_blocks_builds_for_a_while() {
        let tmp = tempfile::tempdir().unwrap();
        let failed = tmp.path().join("k.failed");
        assert!(check_failed(&failed).is_ok());
        std::fs::write(&failed, "no luck").unwrap();
        let err = check_failed(&failed).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::RuntimeUnavailable);
        let old = SystemTime::now() - RETRY_AFTER - Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&failed)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert!(check_failed(&failed).is_ok());
        assert!(!failed.exists());
    }
}
