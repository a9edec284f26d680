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
//!
//! ## Templates
//!
//! With [`VM_TEMPLATE_ARG`] instead of [`VM_MODE_ARG`] the guest is booted
//! to become a *template*: a snapshot that many sandboxes restore from. The
//! agent does step 1, reads the boot JSON (which only names the disks and
//! the channel: nothing of a sandbox is in a template), waits for the disks
//! to probe, mounts the image disk read-only (every sandbox of a template
//! has its image), opens the channel, and writes one frame, a
//! [`VmTemplateReady`]. The host then saves the VM while the agent is
//! blocked reading the channel. Each guest restored from it reads one
//! [`VmResume`] frame: before anything else it mixes the frame's entropy
//! into the kernel's pool and reseeds the CRNG (two guests of one snapshot
//! would otherwise share their random state), sets the wall clock (the
//! kernel has no RTC driver; a snapshot's clock is its age behind), and
//! drops the data disk's cached blocks (the disk behind it is the
//! sandbox's now, not the template's); then it goes on from step 3 with the frame's boot
//! configuration, exactly as a cold boot would, and serves the protocol on
//! the channel it already holds. A cold boot gets the wall clock from
//! [`VmBoot::clock`]. Either kind of template brings `lo` up, starts its
//! channel's writer and lets the guest settle before it says it is ready,
//! so that a restored guest runs as little code as it can before its
//! hello (under TCG, every path it runs is translated afresh).
//!
//! With [`VM_TEMPLATE_ROOT_ARG`] the template goes further before it says
//! it is ready: it also mounts the data disk (a freshly formatted one),
//! creates the overlay's layers on it, switches to the overlay root, sets
//! up `/dev`, `/dev/shm` and `/tmp`, and syncs. That template serves first
//! starts only: the host gives each such sandbox a copy of the template's
//! data disk as it was saved, so the guest's cached view of the disk is
//! the disk's content. After the [`VmResume`] it neither drops the data
//! disk's blocks nor mounts anything but the sandbox's shares, and goes on
//! from the `/etc` files.
//!
//! ## Layer boots
//!
//! With [`VM_LAYER_ARG`] the guest is booted only to read a stopped
//! sandbox's writable layer: the host attaches the sandbox's data disk
//! alone (writes to it land in a throwaway overlay, so a journal replay
//! does not change it). The agent does step 1, reads the boot JSON, waits
//! for the data disk, mounts it read-only, keeps its `upper/` (an empty
//! directory if the disk has none) for `WriteLayer`, and serves the
//! protocol on the channel without switching root: nothing of the
//! sandbox runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Path of the boot JSON inside the initramfs.
pub const VM_BOOT_PATH: &str = "/burrow/boot.json";

/// I/O port of QEMU's `isa-debug-exit` device.
pub const VM_EXIT_PORT: u16 = 0xf4;

/// Kernel command line word that puts the agent (as init) in VM mode.
pub const VM_MODE_ARG: &str = "--vm";

/// Kernel command line word that boots the agent (as init) as a template
/// (see the module documentation).
pub const VM_TEMPLATE_ARG: &str = "--vm-template";

/// Kernel command line word that boots the agent as a template of first
/// starts, with a fresh data disk mounted as the sandbox's root (see the
/// module documentation).
pub const VM_TEMPLATE_ROOT_ARG: &str = "--vm-template-root";

/// Kernel command line word that boots the agent to stream a stopped
/// sandbox's writable layer (see "Layer boots" in the module
/// documentation).
pub const VM_LAYER_ARG: &str = "--vm-layer";

/// Bytes of entropy the host hands a restored guest (256 bits or more).
pub const VM_ENTROPY_BYTES: usize = 64;

/// The template guest's word that it is ready to be saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmTemplateReady {
    /// The agent's protocol version (the host refuses another).
    pub version: u32,
}

/// What a guest restored from a template gets first: who it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmResume {
    /// The sandbox's boot configuration (its disks and channel must be the
    /// template's).
    pub boot: VmBoot,
    /// Fresh random bytes from the host ([`VM_ENTROPY_BYTES`]), credited
    /// to the guest's pool.
    pub entropy: crate::Bytes,
}

/// Wall-clock time, as seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WallClock {
    /// Whole seconds since the epoch.
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nanos: u32,
}

impl WallClock {
    /// The host's clock now.
    pub fn now() -> WallClock {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        WallClock {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        }
    }
}

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
    /// The guest's `/etc/machine-id` (32 lowercase hex digits; None: leave
    /// the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_id: Option<String>,
    /// The host's wall clock when it wrote this configuration: the guest's
    /// clock is set to it (None: leave the kernel's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<WallClock>,
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
