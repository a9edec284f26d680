//! The boot configuration (`/burrow/boot.json`, step 2 of the setup) and
//! what is derived from it: the processes' environment and working
//! directory.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use burrow_protocol::vm::VmBoot;

use super::{At, SetupError, Stage};
use crate::log::warning;

/// Longest serial a virtio-blk disk reports (`VIRTIO_BLK_ID_BYTES`): a
/// longer one is cut, and would never match.
const MAX_SERIAL: usize = 20;
/// Longest hostname the kernel takes (`HOST_NAME_MAX`).
const MAX_HOSTNAME: usize = 64;

/// Reads and checks the boot configuration.
pub(super) fn read_boot(path: &Path) -> Result<VmBoot, SetupError> {
    let bytes = fs::read(path).at(Stage::Boot, format_args!("reading {}", path.display()))?;
    check_boot(&bytes).map_err(|e| SetupError::new(Stage::Boot, format!("{}: {e}", path.display())))
}

/// Parses and checks a boot configuration.
fn check_boot(bytes: &[u8]) -> Result<VmBoot, String> {
    let boot: VmBoot = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    validate(&boot)?;
    Ok(boot)
}

/// Checks a boot configuration (parsed from the boot JSON, or handed over
/// in a resume frame).
pub(super) fn validate(boot: &VmBoot) -> Result<(), String> {
    for (what, serial) in [("root", &boot.root_serial), ("data", &boot.data_serial)] {
        if serial.is_empty() || serial.len() > MAX_SERIAL {
            return Err(format!(
                "the {what} serial {serial:?} must have 1 to {MAX_SERIAL} bytes (virtio-blk cuts longer ones)"
            ));
        }
    }
    if boot.root_serial == boot.data_serial {
        return Err(format!(
            "root and data disks have the same serial {:?}",
            boot.root_serial
        ));
    }
    if boot.channel.is_empty() {
        return Err("the channel name is empty".into());
    }
    if boot.hostname.is_empty() || boot.hostname.len() > MAX_HOSTNAME {
        return Err(format!(
            "the hostname {:?} must have 1 to {MAX_HOSTNAME} bytes",
            boot.hostname
        ));
    }
    if let Some(id) = &boot.machine_id {
        if id.len() != 32
            || !id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(format!(
                "the machine id {id:?} must be 32 lowercase hexadecimal digits"
            ));
        }
    }
    for m in &boot.mounts {
        if !m.target.starts_with('/') || m.target.contains('\0') {
            return Err(format!(
                "mount target {:?} is not an absolute path",
                m.target
            ));
        }
        if m.tag.is_empty() || m.tag.contains('\0') {
            return Err(format!("invalid 9p tag {:?}", m.tag));
        }
    }
    Ok(())
}

/// The process environment base: the boot configuration's, minus entries
/// `execve` could not carry (which are logged).
pub(super) fn environment(env: &BTreeMap<String, String>) -> Vec<(OsString, OsString)> {
    env.iter()
        .filter(|(k, v)| {
            let ok = !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0');
            if !ok {
                warning!("vm: dropping invalid environment variable {k:?}");
            }
            ok
        })
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// The default working directory: `cwd` if it is an absolute path to a
/// directory under `root`, else `/`.
pub(super) fn working_dir(root: &Path, cwd: &str) -> PathBuf {
    match cwd.strip_prefix('/') {
        Some(rel) if root.join(rel).is_dir() => PathBuf::from(cwd),
        _ => {
            warning!("vm: working directory {cwd:?} does not exist; using /");
            PathBuf::from("/")
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::fixtures::{boot, write};
    use burrow_protocol::vm::VmMount;

    #[test]
    fn boot_json_is_parsed_and_checked() {
        let good = serde_json::to_vec(&boot()).expect("serialises");
        assert_eq!(check_boot(&good).expect("valid"), boot());

        let bad = |f: fn(&mut VmBoot)| {
            let mut b = boot();
            f(&mut b);
            check_boot(&serde_json::to_vec(&b).expect("serialises")).expect_err("invalid")
        };
        assert!(bad(|b| b.root_serial = "x".repeat(21)).contains("20 bytes"));
        assert!(bad(|b| b.data_serial.clear()).contains("data serial"));
        assert!(bad(|b| b.data_serial = b.root_serial.clone()).contains("same serial"));
        assert!(bad(|b| b.channel.clear()).contains("channel"));
        assert!(bad(|b| b.hostname = "h".repeat(65)).contains("hostname"));
        assert!(bad(|b| b.machine_id = Some("ABC".repeat(10) + "de")).contains("machine id"));
        assert!(bad(|b| b.machine_id = Some("a".repeat(31))).contains("machine id"));
        assert!(bad(|b| b.mounts = vec![VmMount {
            tag: "t".into(),
            target: "rel".into(),
            read_only: false
        }])
        .contains("absolute"));

        assert!(check_boot(b"{").is_err());
        let mut extra = serde_json::to_value(boot()).expect("serialises");
        extra["surprise"] = 1.into();
        assert!(check_boot(&serde_json::to_vec(&extra).expect("serialises")).is_err());
    }

    #[test]
    fn read_boot_reports_a_missing_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let err = read_boot(&tmp.path().join("boot.json")).expect_err("missing");
        assert_eq!(err.stage, Stage::Boot);
        assert_eq!(err.code(), 11);
        assert!(err.to_string().contains("boot.json"));
    }

    #[test]
    fn environment_comes_from_the_boot_config() {
        let env = BTreeMap::from([
            ("PATH".to_string(), "/bin".to_string()),
            ("HOME".into(), "/home/u".into()),
            ("EMPTY".into(), String::new()),
            (String::new(), "nameless".into()),
            ("A=B".into(), "x".into()),
            ("NUL".into(), "a\0b".into()),
        ]);
        let got = environment(&env);
        assert_eq!(
            got,
            [
                (OsString::from("EMPTY"), OsString::from("")),
                ("HOME".into(), "/home/u".into()),
                ("PATH".into(), "/bin".into()),
            ]
        );
    }

    #[test]
    fn working_dir_falls_back_to_root() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        fs::create_dir_all(r.join("home/u")).expect("mkdir");
        write(&r.join("file"), "");
        assert_eq!(working_dir(r, "/home/u"), Path::new("/home/u"));
        assert_eq!(working_dir(r, "/"), Path::new("/"));
        assert_eq!(working_dir(r, "/missing"), Path::new("/"));
        assert_eq!(working_dir(r, "/file"), Path::new("/"));
        assert_eq!(working_dir(r, "home/u"), Path::new("/"));
        assert_eq!(working_dir(r, ""), Path::new("/"));
    }
}
