//! Templates: waiting in a snapshot for a sandbox's identity, and taking
//! it (see "Templates" in [`burrow_protocol::vm`]).
//!
//! A template guest writes [`VmTemplateReady`] on the channel and blocks
//! reading a [`VmResume`]; the host saves the VM meanwhile. A guest
//! restored from the snapshot gets the frame, and before anything of the
//! sandbox runs: credits the host's entropy to the kernel's pool and
//! reseeds the CRNG, sets the wall clock, and drops the cached blocks of
//! the data disk (the image disk, mounted by the template, is the same). The frame is checked like `/burrow/boot.json`; its disks and
//! channel must be the template's, since the devices are.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use burrow_protocol::vm::{VmBoot, VmResume, VmTemplateReady, WallClock, VM_ENTROPY_BYTES};
use burrow_protocol::{read_frame, write_frame, PROTOCOL_VERSION};

use super::boot::validate;
use super::{At, SetupError, Stage};

/// `RNDADDENTROPY`: `_IOW('R', 0x03, int[2])`.
const RNDADDENTROPY: libc::c_ulong = 0x4008_5203;
/// `RNDRESEEDCRNG`: `_IO('R', 0x07)`.
const RNDRESEEDCRNG: libc::c_ulong = 0x5207;
/// `BLKFLSBUF`: `_IO(0x12, 97)`.
const BLKFLSBUF: libc::c_ulong = 0x1261;

/// Says the template is ready, then waits (across the snapshot) for the
/// identity of the sandbox this guest becomes, and checks it against the
/// template's boot configuration.
pub(super) fn await_resume(port: &File, template: &VmBoot) -> Result<VmBoot, SetupError> {
    // Opened before the snapshot: a restored guest skips the lookup.
    let random = open_random().at(Stage::Resume, "opening /dev/urandom")?;
    let mut writer = port;
    write_frame(
        &mut writer,
        &VmTemplateReady {
            version: PROTOCOL_VERSION,
        },
    )
    .at(Stage::Resume, "announcing the template")?;
    let mut reader = port;
    let resume: VmResume = match read_frame(&mut reader) {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(SetupError::new(
                Stage::Resume,
                "the host closed the channel before handing over an identity",
            ))
        }
        Err(e) => {
            return Err(SetupError::new(
                Stage::Resume,
                format!("reading the identity: {e}"),
            ))
        }
    };
    let boot = checked_resume(&resume, template)?;
    // Before anything else happens in the guest: nothing may draw random
    // numbers from the snapshot's state once the guest is someone's.
    apply_entropy(&random, &resume).at(Stage::Resume, "adding the host's entropy")?;
    Ok(boot)
}

/// The kernel's random device, open for writing (its ioctls).
pub(super) fn open_random() -> io::Result<File> {
    File::options().write(true).open("/dev/urandom")
}

/// Credits a resume's entropy (at least [`VM_ENTROPY_BYTES`]) to `random`
/// (see [`open_random`]) and reseeds.
pub(super) fn apply_entropy(random: &File, resume: &VmResume) -> io::Result<()> {
    if resume.entropy.0.len() < VM_ENTROPY_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} bytes of entropy; at least {VM_ENTROPY_BYTES} are needed",
                resume.entropy.0.len()
            ),
        ));
    }
    add_entropy(random, &resume.entropy.0)
}

/// Checks a [`VmResume`] against the template's boot configuration;
/// returns its own.
fn checked_resume(resume: &VmResume, template: &VmBoot) -> Result<VmBoot, SetupError> {
    let bad = |m: String| SetupError::new(Stage::Resume, m);
    if resume.entropy.0.len() < VM_ENTROPY_BYTES {
        return Err(bad(format!(
            "the host handed over {} bytes of entropy; at least {VM_ENTROPY_BYTES} are needed",
            resume.entropy.0.len()
        )));
    }
    let boot = resume.boot.clone();
    validate(&boot).map_err(|e| bad(format!("the identity: {e}")))?;
    for (what, ours, theirs) in [
        ("root serial", &template.root_serial, &boot.root_serial),
        ("data serial", &template.data_serial, &boot.data_serial),
        ("channel", &template.channel, &boot.channel),
    ] {
        if ours != theirs {
            return Err(bad(format!(
                "the identity's {what} {theirs:?} is not the template's {ours:?}"
            )));
        }
    }
    Ok(boot)
}

/// Mixes `bytes` into the kernel's input pool, credited in full, and
/// reseeds the CRNG from it: every later `getrandom`, and the per-CPU
/// generators (which follow the base one's generation), differ from the
/// snapshot's.
fn add_entropy(random: &File, bytes: &[u8]) -> io::Result<()> {
    // struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
    let mut info: Vec<u8> = Vec::with_capacity(8 + bytes.len());
    info.extend_from_slice(&((bytes.len() * 8) as i32).to_ne_bytes());
    info.extend_from_slice(&(bytes.len() as i32).to_ne_bytes());
    info.extend_from_slice(bytes);
    // Word-aligned, as the kernel reads it.
    let mut words = vec![0u32; info.len().div_ceil(4)];
    for (w, chunk) in words.iter_mut().zip(info.chunks(4)) {
        let mut b = [0u8; 4];
        b[..chunk.len()].copy_from_slice(chunk);
        *w = u32::from_ne_bytes(b);
    }
    // SAFETY: `words` is a valid rand_pool_info whose buf_size matches the
    // bytes that follow the header; the kernel only reads it.
    crate::sys::cvt(unsafe {
        libc::ioctl(random.as_raw_fd(), RNDADDENTROPY as _, words.as_ptr())
    })?;
    // SAFETY: RNDRESEEDCRNG takes no argument.
    crate::sys::cvt(unsafe { libc::ioctl(random.as_raw_fd(), RNDRESEEDCRNG as _) })?;
    Ok(())
}

/// Sets the wall clock to `clock`, plus `since` (how long ago the host
/// read it, as far as the guest can tell).
pub(super) fn set_clock(clock: WallClock, since: std::time::Duration) -> io::Result<()> {
    let (secs, nanos) = clock_after(clock, since);
    let ts = libc::timespec {
        tv_sec: secs,
        tv_nsec: nanos as _,
    };
    // SAFETY: a valid timespec; CLOCK_REALTIME needs CAP_SYS_TIME, which
    // init has.
    crate::sys::cvt(unsafe { libc::clock_settime(libc::CLOCK_REALTIME, &ts) }).map(drop)
}

/// `clock` plus `since`, as seconds and nanoseconds.
fn clock_after(clock: WallClock, since: std::time::Duration) -> (i64, u32) {
    let total = u128::from(clock.nanos) + since.as_nanos();
    (
        clock.secs.saturating_add((total / 1_000_000_000) as i64),
        (total % 1_000_000_000) as u32,
    )
}

/// How long the kernel has been running (`CLOCK_BOOTTIME`).
pub(super) fn since_boot() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    std::time::Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Drops the cached blocks of the disk at `dev`: the template probed its
/// own data disk, and this guest's is another file behind the same device.
pub(super) fn flush_disk(dev: &Path) -> Result<(), SetupError> {
    let disk = File::open(dev).at(Stage::Resume, format_args!("opening {}", dev.display()))?;
    // SAFETY: BLKFLSBUF takes no argument.
    crate::sys::cvt(unsafe { libc::ioctl(disk.as_raw_fd(), BLKFLSBUF as _, 0) })
        .at(Stage::Resume, format_args!("flushing {}", dev.display()))
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::fixtures::boot;

    fn resume(f: impl FnOnce(&mut VmResume)) -> VmResume {
        let mut r = VmResume {
            boot: boot(),
            entropy: vec![7u8; VM_ENTROPY_BYTES].into(),
        };
        f(&mut r);
        r
    }

    /// What is refused before the pool is touched.
    #[test]
    fn resumes_are_checked_against_the_template() {
        let ok = checked_resume(&resume(|r| r.boot.hostname = "other".into()), &boot())
            .expect("a valid identity");
        assert_eq!(ok.hostname, "other");
        let refused = [
            resume(|r| r.entropy = vec![1u8; 8].into()),
            resume(|r| r.boot.data_serial = "elsewhere".into()),
            resume(|r| r.boot.root_serial = "elsewhere".into()),
            resume(|r| r.boot.channel = "other.port".into()),
            resume(|r| r.boot.hostname.clear()),
        ];
        for r in refused {
            let err = checked_resume(&r, &boot()).expect_err("refused");
            assert_eq!(err.stage, Stage::Resume);
            assert_eq!(err.code(), 18);
        }
    }

    #[test]
    fn the_clock_is_advanced_by_the_time_since() {
        let c = WallClock {
            secs: 10,
            nanos: 900_000_000,
        };
        assert_eq!(
            clock_after(c, std::time::Duration::from_millis(250)),
            (11, 150_000_000)
        );
        assert_eq!(clock_after(c, std::time::Duration::ZERO), (10, 900_000_000));
        assert!(since_boot() > std::time::Duration::ZERO);
    }
}
