//! The initramfs handed to the guest kernel: an uncompressed `newc` cpio
//! archive with the agent as `/init`, its boot JSON, the directories the
//! agent mounts on, and `/dev/console` (so the kernel can give init its
//! standard streams before anything is mounted).

use std::io::{self, Write};
use std::path::Path;

use crate::error::{Error, Result};

/// One archive member.
#[derive(Debug)]
enum Entry<'a> {
    Dir,
    File { mode: u32, data: &'a [u8] },
    CharDev { major: u32, minor: u32 },
}

/// Writes `newc` members to `out`.
struct Writer<W: Write> {
    out: W,
    ino: u32,
}

impl<W: Write> Writer<W> {
    fn entry(&mut self, name: &str, entry: &Entry<'_>) -> io::Result<()> {
        let (mode, size, rdev) = match entry {
            Entry::Dir => (libc::S_IFDIR | 0o755, 0, (0, 0)),
            Entry::File { mode, data } => (libc::S_IFREG | mode, data.len(), (0, 0)),
            Entry::CharDev { major, minor } => (libc::S_IFCHR | 0o600, 0, (*major, *minor)),
        };
        self.header(name, mode, size, rdev)?;
        if let Entry::File { data, .. } = entry {
            self.out.write_all(data)?;
            self.pad(data.len())?;
        }
        Ok(())
    }

    fn header(&mut self, name: &str, mode: u32, size: usize, rdev: (u32, u32)) -> io::Result<()> {
        self.ino += 1;
        let size = u32::try_from(size)
            .map_err(|_| io::Error::other(format!("{name} is too large for a cpio archive")))?;
        let nlink = if mode & libc::S_IFMT == libc::S_IFDIR {
            2
        } else {
            1
        };
        let name_len = name.len() + 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            size,
            0,
            0,
            rdev.0,
            rdev.1,
            name_len as u32,
            0,
        ];
        let mut header = String::with_capacity(110);
        header.push_str("070701");
        for f in fields {
            header.push_str(&format!("{f:08x}"));
        }
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(110 + name_len)
    }

    fn pad(&mut self, len: usize) -> io::Result<()> {
        let n = (4 - len % 4) % 4;
        self.out.write_all(&[0u8; 3][..n])
    }

    fn finish(mut self) -> io::Result<W> {
        self.header("TRAILER!!!", 0, 0, (0, 0))?;
        Ok(self.out)
    }
}

/// Writes the initramfs for one launch to `path`.
pub fn write(path: &Path, agent: &[u8], boot_json: &[u8]) -> Result<()> {
    let err = |e| Error::io("writing the initramfs", Some(path), e);
    let file = std::fs::File::create(path).map_err(err)?;
    let mut w = Writer {
        out: io::BufWriter::with_capacity(1 << 20, file),
        ino: 0,
    };
    let entries = [
        ("dev", Entry::Dir),
        ("dev/console", Entry::CharDev { major: 5, minor: 1 }),
        ("proc", Entry::Dir),
        ("sys", Entry::Dir),
        ("burrow", Entry::Dir),
        (
            "burrow/boot.json",
            Entry::File {
                mode: 0o600,
                data: boot_json,
            },
        ),
        (
            "init",
            Entry::File {
                mode: 0o755,
                data: agent,
            },
        ),
    ];
    for (name, entry) in &entries {
        w.entry(name, entry).map_err(err)?;
    }
    let out = w.finish().map_err(err)?;
    out.into_inner()
        .map_err(|e| err(e.into_error()))?
        .sync_data()
        .map_err(err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// (name, mode, data, rdev) of one member.
    type Member = (String, u32, Vec<u8>, (u32, u32));

    /// Reads back every member.
    fn parse(mut b: &[u8]) -> Vec<Member> {
        let mut out = Vec::new();
        let mut offset = 0usize;
        loop {
            assert_eq!(&b[..6], b"070701");
            let field = |i: usize| {
                u32::from_str_radix(std::str::from_utf8(&b[6 + i * 8..14 + i * 8]).unwrap(), 16)
                    .unwrap()
            };
            let (mode, size, rmaj, rmin, namesize) = (
                field(1),
                field(6) as usize,
                field(9),
                field(10),
                field(11) as usize,
            );
            let name = std::str::from_utf8(&b[110..110 + namesize - 1])
                .unwrap()
                .to_owned();
            let mut at = 110 + namesize;
            at += (4 - (offset + at) % 4) % 4;
            if name == "TRAILER!!!" {
                return out;
            }
            let data = b[at..at + size].to_vec();
            at += size;
            at += (4 - (offset + at) % 4) % 4;
            out.push((name, mode, data, (rmaj, rmin)));
            offset += at;
            b = &b[at..];
        }
    }

    #[test]
    fn archive_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.cpio");
        let agent = b"\x7fELF-ish agent bytes, odd length".to_vec();
        write(&path, &agent, br#"{"x":1}"#).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() % 4, 0);
        let members = parse(&bytes);
        let names: Vec<&str> = members.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "dev",
                "dev/console",
                "proc",
                "sys",
                "burrow",
                "burrow/boot.json",
                "init"
            ]
        );
        let init = &members[6];
        assert_eq!(init.1, libc::S_IFREG | 0o755);
        assert_eq!(init.2, agent);
        assert_eq!(members[5].2, br#"{"x":1}"#);
        assert_eq!(members[1].1 & libc::S_IFMT, libc::S_IFCHR);
        assert_eq!(members[1].3, (5, 1));
    }
}
