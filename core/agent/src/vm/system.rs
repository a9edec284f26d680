//! The guest system (step 5 of the setup): the `/etc` files, the hostname
//! and the loopback interface.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use burrow_protocol::vm::VmBoot;

use super::mounts::mkdir_p;
use crate::sys;

/// The `/etc` files of the guest: name and content.
fn etc_files(boot: &VmBoot) -> Vec<(&'static str, String)> {
    let mut files = vec![
        ("hostname", format!("{}\n", boot.hostname)),
        ("hosts", boot.hosts.clone()),
    ];
    if let Some(resolv) = &boot.resolv_conf {
        files.push(("resolv.conf", resolv.clone()));
    }
    if let Some(id) = &boot.machine_id {
        files.push(("machine-id", format!("{id}\n")));
    }
    files
}

/// An `/etc` file kept open (by a template of first starts, across the
/// snapshot) to be rewritten without a path lookup: its name, the file,
/// and the length of what was written to it.
pub(super) type HeldFile = (&'static str, fs::File, u64);

/// Writes the `/etc` files under `root`, replacing what the image had
/// there (a symlink is replaced, not followed). A plain file of root's with
/// mode 0644 and no other link, as a template of first starts leaves them,
/// is rewritten in place: on the overlay, a removal and a new file would
/// cost a whiteout and its replacement. A file in `held` (what an earlier
/// call under the same root returned) is rewritten through its descriptor,
/// and truncated only if the new content is shorter (a truncation costs
/// far more than the write: templates write short placeholders).
/// Returns every file written, open.
pub(super) fn write_etc(
    root: &Path,
    boot: &VmBoot,
    mut held: Vec<HeldFile>,
) -> io::Result<Vec<HeldFile>> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let etc = root.join("etc");
    let mut written = Vec::new();
    for (name, content) in etc_files(boot) {
        let path = etc.join(name);
        let described = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let len = content.len() as u64;
        if let Some(i) = held.iter().position(|(n, ..)| *n == name) {
            let (_, file, old_len) = held.swap_remove(i);
            file.write_all_at(content.as_bytes(), 0)
                .and_then(|()| match len < old_len {
                    true => file.set_len(len),
                    false => Ok(()),
                })
                .map_err(described)?;
            written.push((name, file, len));
            continue;
        }
        mkdir_p(&etc)?;
        let mut open = fs::OpenOptions::new();
        open.read(true)
            .write(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW);
        match fs::symlink_metadata(&path) {
            Ok(m)
                if m.file_type().is_file()
                    && m.mode() & 0o7777 == 0o644
                    && m.uid() == 0
                    && m.nlink() == 1 =>
            {
                open.truncate(true);
            }
            Ok(_) => {
                match fs::remove_file(&path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(described(e)),
                    _ => {}
                }
                open.create_new(true);
            }
            Err(_) => {
                open.create_new(true);
            }
        }
        let mut file = open.open(&path).map_err(described)?;
        io::Write::write_all(&mut file, content.as_bytes()).map_err(described)?;
        written.push((name, file, len));
    }
    for (name, ..) in held {
        crate::log::warning!("vm: /etc/{name} of the template was not rewritten");
    }
    Ok(written)
}

/// The kernel's hostname (None if it cannot be read).
pub(super) fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which the kernel
    // fills with a NUL-terminated name (truncated to fit).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok()
}

pub(super) fn set_hostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    sys::cvt(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

/// Brings the loopback interface up (`ip link set lo up`).
pub(super) fn loopback_up() -> io::Result<()> {
    // SAFETY: socket takes plain integers.
    let fd =
        sys::cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: socket just returned this fd; nobody else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is a valid value (empty name, zero flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into the
    // valid, exclusively borrowed ifreq.
    sys::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) })?;
    // SAFETY: SIOCGIFFLAGS filled in the flags member of the union.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the valid ifreq.
    sys::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) })?;
    Ok(())
}
#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;
    use crate::vm::fixtures::{boot, write};

    #[test]
    fn etc_files_replace_the_images() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        let mut b = boot();

        // No /etc at all.
        write_etc(r, &b, Vec::new()).expect("written");
        assert_eq!(
            fs::read_to_string(r.join("etc/hostname")).expect("read"),
            "box\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("etc/hosts")).expect("read"),
            b.hosts
        );
        assert!(
            !r.join("etc/resolv.conf").exists(),
            "left alone without a network"
        );
        assert!(!r.join("etc/machine-id").exists(), "left alone without one");
        let mode = fs::metadata(r.join("etc/hosts")).expect("hosts").mode();
        assert_eq!(mode & 0o777, 0o644);

        // The image's resolv.conf is a symlink: replaced, its target untouched.
        write(&r.join("run/stub.conf"), "nameserver 127.0.0.53\n");
        std::os::unix::fs::symlink(r.join("run/stub.conf"), r.join("etc/resolv.conf"))
            .expect("symlink");
        b.resolv_conf = Some("nameserver 10.0.2.3\n".into());
        b.hostname = "other".into();
        b.machine_id = Some("0123456789abcdef0123456789abcdef".into());
        write_etc(r, &b, Vec::new()).expect("written again");
        assert_eq!(
            fs::read_to_string(r.join("etc/machine-id")).expect("read"),
            "0123456789abcdef0123456789abcdef\n"
        );
        let resolv = r.join("etc/resolv.conf");
        assert!(!fs::symlink_metadata(&resolv).expect("meta").is_symlink());
        assert_eq!(
            fs::read_to_string(resolv).expect("read"),
            "nameserver 10.0.2.3\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("run/stub.conf")).expect("read"),
            "nameserver 127.0.0.53\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("etc/hostname")).expect("read"),
            "other\n"
        );

        // A plain 0644 file (a template's) is rewritten in place; one of
        // another mode, or with another link, is replaced.
        let inode = |p: &str| fs::metadata(r.join(p)).expect("meta").ino();
        let hostname = inode("etc/hostname");
        fs::set_permissions(r.join("etc/hosts"), fs::Permissions::from_mode(0o600)).expect("chmod");
        // Held open: its inode cannot be reused by the replacement.
        let old_hosts = fs::File::open(r.join("etc/hosts")).expect("open");
        let hosts = old_hosts.metadata().expect("meta").ino();
        fs::hard_link(r.join("etc/machine-id"), r.join("run/id")).expect("link");
        b.hostname = "third".into();
        b.machine_id = Some("fedcba9876543210fedcba9876543210".into());
        let held = write_etc(r, &b, Vec::new()).expect("written a third time");
        assert_eq!(inode("etc/hostname"), hostname, "rewritten in place");
        assert_ne!(inode("etc/hosts"), hosts, "replaced");
        assert_eq!(
            fs::metadata(r.join("etc/hosts")).expect("hosts").mode() & 0o777,
            0o644
        );
        assert_eq!(
            fs::read_to_string(r.join("etc/hostname")).expect("read"),
            "third\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("run/id")).expect("read"),
            "0123456789abcdef0123456789abcdef\n",
            "the other link is untouched"
        );
        assert_eq!(
            fs::read_to_string(r.join("etc/machine-id")).expect("read"),
            "fedcba9876543210fedcba9876543210\n"
        );

        // Held files are rewritten through their descriptors: shorter
        // content leaves nothing of the longer one behind, and longer
        // content covers the shorter.
        assert_eq!(held.len(), 4);
        b.hostname = "x".into();
        let held = write_etc(r, &b, held).expect("written through the held files");
        assert_eq!(held.len(), 4);
        assert_eq!(
            fs::read_to_string(r.join("etc/hostname")).expect("read"),
            "x\n"
        );
        assert_eq!(inode("etc/hostname"), hostname);
        b.hostname = "longer-name".into();
        write_etc(r, &b, held).expect("written through the held files again");
        assert_eq!(
            fs::read_to_string(r.join("etc/hostname")).expect("read"),
            "longer-name\n"
        );
        assert_eq!(inode("etc/hostname"), hostname);
    }
}
