//! Devices, which probe asynchronously: the disks found by serial (step 3
//! of the setup) and the channel's console port found by name (step 6),
//! looked up under a given sysfs root so the tests can fake one.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use burrow_protocol::vm::VmBoot;

use super::{SetupError, Stage, DEVICE_WAIT};
use crate::sys;

/// Calls `probe` every few milliseconds until it finds something or
/// `limit` has passed.
fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let mut found = None;
    sys::wait_until(limit, || {
        found = probe();
        found.is_some()
    });
    found
}

/// A sysfs attribute's text, without the trailing newline (or NULs).
fn attribute(path: &Path) -> Option<String> {
    let raw = fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&raw);
    Some(text.trim_end_matches(['\n', '\0']).to_owned())
}

/// `(entry, attribute)` for every entry of `dir` whose name starts with
/// `prefix`, sorted; entries without the attribute get an empty one.
fn entries_with(dir: &Path, prefix: &str, attr: &str) -> Vec<(String, String)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.starts_with(prefix))
        .map(|name| {
            let value = attribute(&dir.join(&name).join(attr)).unwrap_or_default();
            (name, value)
        })
        .collect();
    found.sort();
    found
}

/// The virtio-blk disks (`block/vd*` under `sys`) and their serials.
fn list_disks(sys: &Path) -> Vec<(String, String)> {
    entries_with(&sys.join("block"), "vd", "serial")
}

/// The virtio console ports (`class/virtio-ports/*` under `sys`) and their
/// names (empty until the host named them).
fn list_ports(sys: &Path) -> Vec<(String, String)> {
    entries_with(&sys.join("class/virtio-ports"), "vport", "name")
}

/// The entry whose attribute is `value`.
fn find<'a>(entries: &'a [(String, String)], value: &str) -> Option<&'a str> {
    entries
        .iter()
        .find(|(_, v)| v == value)
        .map(|(name, _)| name.as_str())
}

/// What was found, for an error message.
fn describe(entries: &[(String, String)]) -> String {
    if entries.is_empty() {
        return "none".into();
    }
    let all: Vec<String> = entries.iter().map(|(n, v)| format!("{n} {v:?}")).collect();
    all.join(", ")
}

/// Waits for both disks (their sysfs entries and device nodes).
pub(super) fn wait_for_disks(sys: &Path, boot: &VmBoot) -> Result<(PathBuf, PathBuf), SetupError> {
    let dev = Path::new("/dev");
    let node = |disks: &[(String, String)], serial: &str| {
        Some(dev.join(find(disks, serial)?)).filter(|p| p.exists())
    };
    wait_for(DEVICE_WAIT, || {
        let disks = list_disks(sys);
        Some((
            node(&disks, &boot.root_serial)?,
            node(&disks, &boot.data_serial)?,
        ))
    })
    .ok_or_else(|| {
        SetupError::new(
            Stage::Disks,
            format!(
                "no disks with serials {:?} (image) and {:?} (data) after {} s; found: {}",
                boot.root_serial,
                boot.data_serial,
                DEVICE_WAIT.as_secs(),
                describe(&list_disks(sys))
            ),
        )
    })
}

/// Waits for the data disk alone (a layer boot has no image disk);
/// returns its device node.
pub(super) fn wait_for_data_disk(sys: &Path, boot: &VmBoot) -> Result<PathBuf, SetupError> {
    let dev = Path::new("/dev");
    wait_for(DEVICE_WAIT, || {
        Some(dev.join(find(&list_disks(sys), &boot.data_serial)?)).filter(|p| p.exists())
    })
    .ok_or_else(|| {
        SetupError::new(
            Stage::Disks,
            format!(
                "no disk with serial {:?} (data) after {} s; found: {}",
                boot.data_serial,
                DEVICE_WAIT.as_secs(),
                describe(&list_disks(sys))
            ),
        )
    })
}

/// Waits for the console port named `name`; returns its device node.
pub(super) fn wait_for_port(sys: &Path, dev: &Path, name: &str) -> Result<PathBuf, SetupError> {
    wait_for(DEVICE_WAIT, || {
        Some(dev.join(find(&list_ports(sys), name)?)).filter(|p| p.exists())
    })
    .ok_or_else(|| {
        SetupError::new(
            Stage::Channel,
            format!(
                "no virtio console port named {name:?} after {} s; found: {}",
                DEVICE_WAIT.as_secs(),
                describe(&list_ports(sys))
            ),
        )
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::fixtures::write;

    #[test]
    fn disks_are_found_by_serial() {
        let sys = tempfile::tempdir().expect("tempdir");
        let s = sys.path();
        // As virtio-blk reports it: no newline.
        write(&s.join("block/vda/serial"), "burrow-root");
        // Tolerate a newline and NUL padding.
        write(&s.join("block/vdb/serial"), "burrow-data\n");
        write(&s.join("block/vdc/serial"), "other\0\0\0");
        // No serial attribute, and not a virtio disk.
        fs::create_dir_all(s.join("block/vdd")).expect("mkdir");
        write(&s.join("block/loop0/serial"), "burrow-root");

        let disks = list_disks(s);
        assert_eq!(
            disks,
            [
                ("vda".to_string(), "burrow-root".to_string()),
                ("vdb".into(), "burrow-data".into()),
                ("vdc".into(), "other".into()),
                ("vdd".into(), String::new()),
            ]
        );
        assert_eq!(find(&disks, "burrow-root"), Some("vda"));
        assert_eq!(find(&disks, "burrow-data"), Some("vdb"));
        assert_eq!(find(&disks, "missing"), None);
        assert_eq!(
            find(&disks, ""),
            Some("vdd"),
            "only boot.json rules out empty serials"
        );
        assert!(describe(&disks).contains("vdb \"burrow-data\""));
        assert_eq!(list_disks(&s.join("nowhere")), []);
        assert_eq!(describe(&[]), "none");
    }

    #[test]
    fn the_port_is_found_by_name() {
        let sys = tempfile::tempdir().expect("tempdir");
        let ports = sys.path().join("class/virtio-ports");
        write(&ports.join("vport0p0/name"), "org.qemu.guest_agent.0\n");
        write(&ports.join("vport0p1/name"), "burrow.agent\n");
        // Not named (yet).
        fs::create_dir_all(ports.join("vport1p1")).expect("mkdir");

        let found = list_ports(sys.path());
        assert_eq!(find(&found, "burrow.agent"), Some("vport0p1"));
        assert_eq!(find(&found, "burrow"), None);
        assert_eq!(found.len(), 3);
    }

    #[test]
    fn waiting_for_a_port_gives_its_device_node() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (sys, dev) = (tmp.path().join("sys"), tmp.path().join("dev"));
        write(
            &sys.join("class/virtio-ports/vport2p3/name"),
            "burrow.agent\n",
        );
        write(&dev.join("vport2p3"), "");
        assert_eq!(
            wait_for_port(&sys, &dev, "burrow.agent").expect("found"),
            dev.join("vport2p3")
        );
    }

    #[test]
    fn wait_for_polls_until_found() {
        let mut calls = 0;
        let got = wait_for(Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(got, Some(3));
        assert_eq!(wait_for(Duration::ZERO, || None::<()>), None);
    }
}
