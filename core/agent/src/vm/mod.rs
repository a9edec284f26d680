//! VM mode: the agent as the `/init` of a QEMU microVM.
//!
//! The contract is [`burrow_protocol::vm`]. [`setup`] runs first thing in
//! `main`, on the only thread, before the signal mask and the channel: it
//! turns the initramfs the kernel started us in into the sandbox's root
//! filesystem and says where the channel is and what processes start from.
//!
//! Steps, in order:
//! 1. `devtmpfs` on `/dev`, then `/dev/console` onto fds 0..=2 (so every
//!    later log line reaches the host's serial console), `proc`, `sysfs`;
//! 2. `/burrow/boot.json` is read and checked;
//! 3. the two disks are found by serial (waiting for them to probe), the
//!    image mounted read-only, the data disk read-write (`upper/` and
//!    `work/` created on first use), the overlay of both at `/burrow/root`;
//! 4. `/dev`, `/proc` and `/sys` are moved into the new root, which then
//!    becomes `/` (move mount + chroot: `pivot_root` does not work on the
//!    initramfs);
//! 5. inside it: `/dev/pts` (with `/dev/ptmx` pointing at it), the usual
//!    `/dev` links, `/dev/shm`, `/tmp`, the 9p shares, `/etc/hostname`,
//!    `/etc/hosts`, `/etc/resolv.conf`; the hostname; `lo` up; the working
//!    directory;
//! 6. the channel port is found by name.
//!
//! A template (`--vm-template`) mounts the image and brings `lo` up after
//! step 3's wait for the disks, opens the channel, and waits there, in the
//! host's snapshot, for the identity of the sandbox it becomes (`resume`);
//! it then goes on from the mounts with that boot configuration and keeps
//! the channel it holds. A template of first starts (`--vm-template-root`)
//! does steps 3 and 4 and the sandbox-independent mounts of step 5 with
//! the fresh data disk it was booted with before it waits (the host gives
//! each first start a copy of that disk), and goes on from the shares. A
//! cold boot sets the wall clock from the boot configuration first.
//!
//! Everything after the switch works with real guest paths, so symlinks in
//! the image (an absolute `/etc/resolv.conf` link, say) resolve inside the
//! guest, never in the initramfs.
//!
//! Every failure is a [`SetupError`]; its [`Stage`] code is what the host
//! gets through the exit port (`main` logs the message to the console
//! first). The pure parts (sysfs lookups under a given root, mount specs,
//! the environment, the working directory, files under a given root) take
//! their inputs as parameters and are unit-tested.

mod boot;
mod devices;
mod mounts;
mod resume;
mod system;

use std::fmt;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burrow_protocol::vm::VM_BOOT_PATH;

use crate::agent::ProcessBase;
use crate::log::{info, warning};
use crate::spawn::Credentials;
use crate::sys;

use boot::{environment, read_boot, working_dir};
use devices::{wait_for_disks, wait_for_port};
use mounts::{
    early_mounts, enter_root, mount_all, mount_guest_dev, mount_image, mount_root, scratch_mounts,
    share_mounts,
};
use system::{loopback_up, set_hostname, write_etc};

/// How long to wait for devices, which probe asynchronously, to show up
/// (and for the host end of the channel to be connected).
const DEVICE_WAIT: Duration = Duration::from_secs(5);

/// How long a template lets the guest settle before it says it is ready.
const TEMPLATE_SETTLE: Duration = Duration::from_millis(200);

/// The part of the setup that failed. Its code is the agent's exit code
/// (QEMU's exit status is `2 * code + 1`), distinct from the agent's
/// ordinary exit codes (0, 1, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Mounting `devtmpfs`, `proc` or `sysfs` in the initramfs.
    Early = 10,
    /// Reading or checking `/burrow/boot.json`.
    Boot = 11,
    /// The disks did not show up.
    Disks = 12,
    /// Mounting the image, the data disk or the overlay.
    Root = 13,
    /// Moving `/dev`, `/proc`, `/sys` into the new root, or switching to it.
    SwitchRoot = 14,
    /// `/dev/pts`, `/dev/shm`, `/tmp` or a 9p share.
    Mounts = 15,
    /// The `/etc` files, the hostname or the loopback interface.
    System = 16,
    /// The channel port did not show up.
    Channel = 17,
    /// A template guest could not take a sandbox's identity.
    Resume = 18,
}

/// Why the VM setup failed.
#[derive(Debug)]
pub struct SetupError {
    /// Where it failed.
    pub stage: Stage,
    /// What failed, for the console.
    pub message: String,
}

impl SetupError {
    fn new(stage: Stage, message: impl Into<String>) -> SetupError {
        SetupError {
            stage,
            message: message.into(),
        }
    }

    /// The exit code that tells the host where the setup failed.
    pub fn code(&self) -> i32 {
        self.stage as i32
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (exit code {})", self.message, self.code())
    }
}

/// Attaches a stage and a description to an error.
trait At<T> {
    fn at(self, stage: Stage, what: impl fmt::Display) -> Result<T, SetupError>;
}

impl<T, E: fmt::Display> At<T> for Result<T, E> {
    fn at(self, stage: Stage, what: impl fmt::Display) -> Result<T, SetupError> {
        self.map_err(|e| SetupError::new(stage, format!("{what}: {e}")))
    }
}

/// What a template guest does before it is saved (see the module
/// documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Template {
    /// The image mounted and `lo` up (`--vm-template`).
    Image,
    /// Also the fresh data disk, the overlay root and the scratch mounts
    /// (`--vm-template-root`).
    Root,
}

/// What `main` needs once the guest is set up.
#[derive(Debug)]
pub struct Guest {
    /// The channel's device (`/dev/vportNpM`).
    pub channel: PathBuf,
    /// The channel, already open (a template's, which it was saved with).
    pub open_channel: Option<File>,
    /// Environment and identity of the processes the agent starts.
    pub base: ProcessBase,
    /// What the setup did, for the log.
    pub summary: Summary,
}

/// What the setup did: one line, formatted (and logged) once the session
/// is open. Under emulation each console line costs the serial port's
/// time, and the formatting code its translation.
#[derive(Debug)]
pub struct Summary {
    took: Duration,
    steps: Steps,
    /// The image disk (none in a layer boot): device and serial number.
    image: Option<(PathBuf, String)>,
    /// The data disk: device and serial number.
    data: (PathBuf, String),
    /// The channel's device and port name.
    channel: (PathBuf, String),
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "vm: set up in {} ms ({}); ",
            self.took.as_millis(),
            self.steps.summary()
        )?;
        if let Some((image, serial)) = &self.image {
            write!(f, "image {} ({serial:?}), ", image.display())?;
        }
        let (data, serial) = &self.data;
        write!(
            f,
            "data {} ({serial:?}), channel {} ({:?})",
            data.display(),
            self.channel.0.display(),
            self.channel.1
        )
    }
}

/// Sets the microVM up (see the module documentation). Call on the only
/// thread, as PID 1 of a VM. A `template` calls `early` with its channel
/// (path and open port) before it is saved, and returns what that gave;
/// it then waits, in the snapshot the host takes of it, for the identity
/// of the sandbox it becomes (see `resume`).
pub fn setup<T>(
    template: Option<Template>,
    early: impl FnOnce(&Path, &File) -> Result<T, String>,
) -> Result<(Guest, Option<T>), SetupError> {
    let mut started = Instant::now();
    early_mounts()?;
    let mut boot = read_boot(Path::new(VM_BOOT_PATH))?;

    let (image, data) = wait_for_disks(Path::new("/sys"), &boot)?;
    let mut open_channel = None;
    let mut served = None;
    let mut held = Vec::new();
    // Whether the overlay root is already `/` (a template of first starts).
    let rooted = template == Some(Template::Root);
    if let Some(kind) = template {
        // Every sandbox of a template has its image: mounted once, here.
        mount_image(&image)?;
        if kind == Template::Root {
            // Every first start gets a copy of this data disk as it is
            // saved: the layers on it and the root are the same for all.
            enter_sandbox_root(&image, &data, true)?;
            // The files every sandbox replaces, copied up to the data disk
            // once (placeholders: the boot configuration's).
            // Kept open across the snapshot: rewritten without a lookup.
            held =
                write_etc(Path::new("/"), &boot, Vec::new()).at(Stage::System, "writing /etc")?;
            // SAFETY: sync has no preconditions.
            unsafe { libc::sync() };
        }
        loopback_up().at(Stage::System, "bringing lo up")?;
        let path = wait_for_port(Path::new("/sys"), Path::new("/dev"), &boot.channel)?;
        let port = File::options()
            .read(true)
            .write(true)
            .open(&path)
            .at(Stage::Channel, format_args!("opening {}", path.display()))?;
        wait_for_host(&port);
        served = Some(early(&path, &port).map_err(|e| SetupError::new(Stage::Channel, e))?);
        info!("vm: template ready; waiting for an identity");
        // What the setup left to finish (the console's output, RCU grace
        // periods, deferred work) runs now, not in every restored guest,
        // where TCG would translate its code afresh each time.
        std::thread::sleep(TEMPLATE_SETTLE);
        boot = resume::await_resume(&port, &boot)?;
        // From here on it is this sandbox's setup.
        started = Instant::now();
        if let Some(clock) = boot.clock {
            resume::set_clock(clock, Duration::ZERO).at(Stage::Resume, "setting the clock")?;
        }
        if !rooted {
            resume::flush_disk(&data)?;
        }
        open_channel = Some((path, port));
    } else if let Some(clock) = boot.clock {
        // The host read its clock right before it started QEMU.
        resume::set_clock(clock, resume::since_boot()).at(Stage::System, "setting the clock")?;
    }
    let mut steps = Steps::new(started);
    if !rooted {
        enter_sandbox_root(&image, &data, template.is_some())?;
        steps.mark("root");
    }
    mount_all(&share_mounts(&boot.mounts), Stage::Mounts)?;
    steps.mark("mounts");

    // The template's files are kept open until here, then closed.
    drop(write_etc(Path::new("/"), &boot, held).at(Stage::System, "writing /etc")?);
    set_hostname(&boot.hostname).at(Stage::System, "setting the hostname")?;
    if template.is_none() {
        loopback_up().at(Stage::System, "bringing lo up")?;
    }
    steps.mark("system");
    let cwd = working_dir(Path::new("/"), &boot.cwd);
    if let Err(e) = std::env::set_current_dir(&cwd) {
        warning!("vm: cannot enter {}: {e}; using /", cwd.display());
        std::env::set_current_dir("/").at(Stage::System, "entering /")?;
    }

    let (channel, open_channel) = match open_channel {
        Some((path, port)) => (path, Some(port)),
        None => (
            wait_for_port(Path::new("/sys"), Path::new("/dev"), &boot.channel)?,
            None,
        ),
    };
    steps.mark("channel");
    let summary = Summary {
        took: started.elapsed(),
        steps,
        image: Some((image, boot.root_serial)),
        data: (data, boot.data_serial),
        channel: (channel.clone(), boot.channel),
    };
    let guest = Guest {
        channel,
        open_channel,
        summary,
        base: ProcessBase {
            env: environment(&boot.env),
            user: Credentials::new(boot.uid, boot.gid),
        },
    };
    Ok((guest, served))
}

/// Sets up a layer boot (see "Layer boots" in [`burrow_protocol::vm`]):
/// the data disk read-only, its upper directory kept for `WriteLayer`, the
/// channel; no root switch, nothing of the sandbox.
pub fn setup_layer() -> Result<Guest, SetupError> {
    let started = Instant::now();
    early_mounts()?;
    let boot = read_boot(Path::new(VM_BOOT_PATH))?;
    let data = devices::wait_for_data_disk(Path::new("/sys"), &boot)?;
    let mut steps = Steps::new(started);
    let upper = mounts::mount_data_read_only(&data)?;
    crate::layer::remember_upper(&upper)
        .at(Stage::Root, format_args!("opening {}", upper.display()))?;
    steps.mark("data");
    let channel = wait_for_port(Path::new("/sys"), Path::new("/dev"), &boot.channel)?;
    steps.mark("channel");
    Ok(Guest {
        channel: channel.clone(),
        open_channel: None,
        summary: Summary {
            took: started.elapsed(),
            steps,
            image: None,
            data: (data, boot.data_serial),
            channel: (channel, boot.channel),
        },
        base: ProcessBase {
            env: environment(&boot.env),
            user: Credentials::new(boot.uid, boot.gid),
        },
    })
}

/// Steps 3 and 4 and the sandbox-independent mounts of step 5: the disks
/// (the image unless `image_mounted`), the overlay root, the switch to it,
/// `/dev`, `/dev/shm` and `/tmp`.
fn enter_sandbox_root(image: &Path, data: &Path, image_mounted: bool) -> Result<(), SetupError> {
    mount_root(image, data, image_mounted)?;
    enter_root()?;
    mount_guest_dev(Path::new("/dev")).at(Stage::Mounts, "setting up /dev")?;
    mount_all(&scratch_mounts(), Stage::Mounts)
}

/// Time spent in each step of the setup, for the log.
#[derive(Debug)]
struct Steps {
    last: Instant,
    done: Vec<(&'static str, Duration)>,
}

impl Steps {
    fn new(since: Instant) -> Steps {
        Steps {
            last: since,
            done: Vec::new(),
        }
    }

    /// Ends step `name` (it began where the last one ended).
    fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.done.push((name, now - self.last));
        self.last = now;
    }

    /// `name ms, ...` of every step.
    fn summary(&self) -> String {
        let parts: Vec<String> = self
            .done
            .iter()
            .map(|(n, d)| format!("{n} {} ms", d.as_millis()))
            .collect();
        parts.join(", ")
    }
}

/// Takes a [`VmResume`](burrow_protocol::vm::VmResume) after a saved VM
/// was restored: the host's entropy into the pool and a reseed, then the
/// wall clock, then the identity if it is another sandbox's (a fork's copy,
/// a full snapshot's restore: its hostname, `/etc/hosts` and machine id;
/// a hibernated sandbox's own are kept as they are).
pub fn apply_resume(resume: &burrow_protocol::vm::VmResume) -> Result<(), String> {
    let random = resume::open_random().map_err(|e| format!("opening /dev/urandom: {e}"))?;
    resume::apply_entropy(&random, resume).map_err(|e| e.to_string())?;
    if let Some(clock) = resume.boot.clock {
        resume::set_clock(clock, Duration::ZERO).map_err(|e| format!("setting the clock: {e}"))?;
    }
    let boot = &resume.boot;
    let machine_id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    let same = system::hostname().as_deref() == Some(boot.hostname.as_str())
        && boot
            .machine_id
            .as_ref()
            .is_none_or(|id| machine_id.trim_end() == id);
    if !same {
        write_etc(Path::new("/"), boot, Vec::new()).map_err(|e| format!("writing /etc: {e}"))?;
        set_hostname(&boot.hostname).map_err(|e| format!("setting the hostname: {e}"))?;
    }
    Ok(())
}

/// Waits (a while) until the host end of the virtio console port is
/// connected. Until then reads on the port return 0, which the agent would
/// take for the host hanging up; the port reports that state as `POLLHUP`.
pub fn wait_for_host(port: &File) {
    let connected = sys::wait_until(DEVICE_WAIT, || {
        let mut fds = [sys::pollfd(
            Some(port.as_raw_fd()),
            libc::POLLIN | libc::POLLOUT,
        )];
        // A zero timeout and a sleep between tries (wait_until): while
        // POLLHUP is reported, poll would return at once anyway.
        sys::poll(&mut fds, Some(Instant::now())).is_ok() && fds[0].revents & libc::POLLHUP == 0
    });
    if !connected {
        warning!("vm: the host end of the channel is not connected; going on anyway");
    }
}

/// Fixtures shared by the tests of the submodules.
#[cfg(test)]
mod fixtures {
    use std::collections::BTreeMap;
    use std::fs;
    use std::path::Path;

    use burrow_protocol::vm::VmBoot;

    /// A valid boot configuration.
    pub(super) fn boot() -> VmBoot {
        VmBoot {
            root_serial: "burrow-root".into(),
            data_serial: "burrow-data".into(),
            channel: "burrow.agent".into(),
            hostname: "box".into(),
            env: BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]),
            cwd: "/work".into(),
            uid: 1000,
            gid: 1000,
            hosts: "127.0.0.1 localhost box\n".into(),
            resolv_conf: None,
            mounts: vec![],
            machine_id: None,
            clock: None,
        }
    }

    /// Writes `content` to `path`, creating its parents.
    pub(super) fn write(path: &Path, content: &str) {
        fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        fs::write(path, content).expect("write");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_codes_are_distinct() {
        let stages = [
            Stage::Early,
            Stage::Boot,
            Stage::Disks,
            Stage::Root,
            Stage::SwitchRoot,
            Stage::Mounts,
            Stage::System,
            Stage::Channel,
            Stage::Resume,
        ];
        let mut codes: Vec<i32> = stages.iter().map(|s| *s as i32).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), stages.len());
        assert!(codes.iter().all(|&c| c > 2 && c < 128));
    }
}
