//! The boot contract between the VM driver (host) and the agent running as a
//! microVM's `/init`.
//!
//! The host writes a [`VmBoot`] as JSON to [`VM_BOOT_PATH`] inside the
//! initramfs it hands to the kernel, and puts the word `--vm` on the kernel
//! command line: a word the kernel does not know (no dot, no `=`) goes to
//! init as an argument, so the agent (the initramfs's `/init`) runs with
//! `--vm`. (Not after a `--`: QEMU's microvm appends its own
//! `virtio_mmio.device=` parameters at the end, which must stay the
//! kernel's.) Serial numbers are at most 20 bytes (virtio-blk's limit).
//! The agent then:
//!
//! 1. mounts `devtmpfs`, `proc` and `sysfs` in the initramfs;
//! 2. finds the virtio block devices by their serial numbers
//!    (`/sys/block/vd*/serial`): [`VmBoot::root_serial`] (the image, mounted
//!    read-only) and [`VmBoot::data_serial`] (the sandbox's writable ext4
//!    disk, holding `upper/` and `work/` of the overlay, kept across runs);
//! 3. mounts the overlay as the new root, with `/proc`, `/sys`, `/dev`,
//!    `/dev/pts`, `/dev/shm` and `/tmp` (tmpfs) inside it, the 9p mounts of
//!    [`VmBoot::mounts`], and writes `/etc/hostname`, `/etc/hosts` and (with
//!    a network) `/etc/resolv.conf`;
//! 4. switches root (move mount + chroot), sets the hostname, brings `lo`
//!    up, takes [`VmBoot::env`] as its environment and [`VmBoot::cwd`] as
//!    its working directory, and runs processes as [`VmBoot::uid`]/`gid`;
//! 5. serves the protocol on the virtio console port named
//!    [`VmBoot::channel`] (found through `/sys/class/virtio-ports/*/name`);
//! 6. when it would exit with code `c`: syncs, writes `c` to the
//!    `isa-debug-exit` port [`VM_EXIT_PORT`] (QEMU then exits with
//!    `2c + 1`), and if that did not end the VM, reboots (with `-no-reboot`
//!    QEMU exits on the reset).
//!
//! A QEMU exit status of 0 therefore means the guest reset without the
//! agent's word (a kernel panic, including the agent dying).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Path of the boot JSON inside the initramfs.
pub const VM_BOOT_PATH: &str = "/burrow/boot.json";

/// I/O port of QEMU's `isa-debug-exit` device.
pub const VM_EXIT_PORT: u16 = 0xf4;

/// Kernel command line word that puts the agent (as init) in VM mode.
pub const VM_MODE_ARG: &str = "--vm";

/// What the agent needs to set up a microVM guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmBoot {
    /// Serial number of the read-only image disk.
    pub root_serial: String,
    /// Serial number of the writable per-sandbox disk (ext4).
    pub data_serial: String,
    /// Name of the virtio console port that carries the protocol.
    pub channel: String,
    /// Guest hostname.
    pub hostname: String,
    /// The guest environment (image env + sandbox env + HOSTNAME, PATH).
    pub env: BTreeMap<String, String>,
    /// Default working directory of processes.
    pub cwd: String,
    /// User id processes run as.
    pub uid: u32,
    /// Group id processes run as.
    pub gid: u32,
    /// Content of `/etc/hosts`.
    pub hosts: String,
    /// Content of `/etc/resolv.conf` (None: leave the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolv_conf: Option<String>,
    /// Host directories shared over virtio-9p.
    #[serde(default)]
    pub mounts: Vec<VmMount>,
}

/// One virtio-9p share mounted in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmMount {
    /// The 9p mount tag (QEMU's `mount_tag`).
    pub tag: String,
    /// Absolute guest path.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}
