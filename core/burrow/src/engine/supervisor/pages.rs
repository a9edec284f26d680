//! Dropping the start's code pages once a sandbox runs.
//!
//! A supervisor executes much more code to start a sandbox (SQLite setup,
//! the image, the rootfs, the runtime, the agent's hello) than to serve it
//! afterwards, and the kernel maps file pages around every fault (64 KiB at
//! a time), so a fresh supervisor holds some 9 MiB of its binary mapped of
//! which a running one uses a fraction. Once Running is published it unmaps
//! the pages of its read-only, file-backed mappings (its own code and
//! constants, and those of the shared libraries); what it runs from then on
//! faults back in from the page cache, shared with every other supervisor.
//! Nothing is lost: those pages are never written, so the file holds exactly
//! what was mapped. Mappings with a private copy of any page (the relocated
//! RELRO data, any text a debugger patched) are left alone.

use std::ops::Range;

/// One file-backed, read-only, private mapping with no private pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CleanMapping {
    pub range: Range<usize>,
    pub path: String,
}

/// The mappings of `smaps` (the text of `/proc/self/smaps`) whose pages can
/// be dropped and faulted back from their file unchanged: read-only (`r--p`
/// or `r-xp`), backed by a file (a path, not `[vdso]` or anonymous memory),
/// and without a single anonymous (copied-on-write) page.
pub(super) fn clean_mappings(smaps: &str) -> Vec<CleanMapping> {
    let mut out = Vec::new();
    let mut current: Option<CleanMapping> = None;
    for line in smaps.lines() {
        if let Some(m) = header(line) {
            out.extend(current.take());
            current = m;
            continue;
        }
        if let Some(rest) = line.strip_prefix("Anonymous:") {
            let private_kb = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(u64::MAX);
            if private_kb != 0 {
                current = None;
            }
        }
    }
    out.extend(current);
    out
}

/// Parses a mapping's header line (`start-end perms offset dev inode path`);
/// `Some(None)` for a mapping that is not a candidate, `None` for a line
/// that is not a header.
fn header(line: &str) -> Option<Option<CleanMapping>> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    if perms.len() != 4 {
        return None;
    }
    let _offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.collect::<Vec<_>>().join(" ");
    let candidate = matches!(perms, "r--p" | "r-xp") && path.starts_with('/') && start < end;
    Some(candidate.then_some(CleanMapping {
        range: start..end,
        path,
    }))
}

/// Unmaps the pages of every clean read-only file mapping of this process
/// (see the module docs); returns how many bytes of mappings were released.
/// Failures change nothing and are only logged: this is an economy.
pub(super) fn release_start_pages() -> usize {
    let smaps = match std::fs::read_to_string("/proc/self/smaps") {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "not releasing start pages: /proc/self/smaps unreadable");
            return 0;
        }
    };
    let mut released = 0;
    for m in clean_mappings(&smaps) {
        let len = m.range.end - m.range.start;
        // SAFETY: the range is a whole mapping of this process, read-only,
        // private and file-backed with no anonymous page (checked above), so
        // MADV_DONTNEED only drops page-table entries that the next access
        // refills from the same, unchanged file contents.
        let rc =
            unsafe { libc::madvise(m.range.start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += len;
        } else {
            tracing::debug!(path = %m.path, error = %std::io::Error::last_os_error(), "madvise failed");
        }
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55f3ea09d000-55f3ea5b0000 r--p 00000000 fe:00 123 /usr/bin/burrow-supervisor
Size:               5196 kB
Rss:                1340 kB
Anonymous:             0 kB
55f3ea5b0000-55f3eaec0000 r-xp 00512000 fe:00 123 /usr/bin/burrow-supervisor
Size:               9280 kB
Anonymous:             0 kB
55f3eaec0000-55f3eaf37000 r--p 00e22000 fe:00 123 /usr/bin/burrow-supervisor
Size:                476 kB
Anonymous:           476 kB
55f3eaf37000-55f3eaf3e000 rw-p 00e97000 fe:00 123 /usr/bin/burrow-supervisor
Anonymous:            28 kB
55f3f3cb0000-55f3f3cf0000 rw-p 00000000 00:00 0                          [heap]
Anonymous:           224 kB
7f4d22ba7000-7f4d22baf000 rw-s 00000000 fe:00 77 /tmp/home/state.db-shm
Anonymous:             0 kB
7f4d231e2000-7f4d23338000 r-xp 00028000 fe:00 9 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7ffcc3ffa000-7ffcc3ffc000 r-xp 00000000 00:00 0                          [vdso]
Anonymous:             0 kB
7f4d23500000-7f4d23501000 r--p 00000000 fe:00 10 /opt/a dir/lib.so
Anonymous:             0 kB
";

    #[test]
    fn only_clean_read_only_file_mappings_are_released() {
        let got = clean_mappings(SMAPS);
        let ranges: Vec<_> = got
            .iter()
            .map(|m| (m.range.start, m.path.as_str()))
            .collect();
        assert_eq!(
            ranges,
            vec![
                (0x55f3ea09d000, "/usr/bin/burrow-supervisor"),
                (0x55f3ea5b0000, "/usr/bin/burrow-supervisor"),
                (0x7f4d231e2000, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                (0x7f4d23500000, "/opt/a dir/lib.so"),
            ]
        );
        // The relocated RELRO data (read-only now, but copied) is kept.
        assert!(got.iter().all(|m| m.range.start != 0x55f3eaec0000));
    }

    #[test]
    fn an_unreadable_anonymous_count_keeps_the_mapping() {
        let smaps = "1000-2000 r--p 00000000 fe:00 1 /bin/x\nAnonymous:   garbage\n";
        assert!(clean_mappings(smaps).is_empty());
    }

    /// Resident kB of this process's clean mappings (their `Rss:` lines).
    fn clean_rss_kb() -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let clean = clean_mappings(&smaps);
        let mut total = 0;
        let mut counting = false;
        for line in smaps.lines() {
            if let Some(Some(m)) = header(line) {
                counting = clean.contains(&m);
            } else if header(line).is_some() {
                counting = false;
            } else if let Some(rest) = line.strip_prefix("Rss:") {
                if counting {
                    total += rest
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .unwrap();
                }
            }
        }
        total
    }

    #[test]
    fn releasing_drops_resident_pages_and_keeps_the_process_working() {
        let before = clean_rss_kb();
        assert!(before > 0);
        assert!(release_start_pages() > 0);
        let after = clean_rss_kb();
        assert!(
            after < before,
            "resident {after} kB after, {before} kB before"
        );
        // Code and constants fault back in from the files.
        let v: Vec<u64> = (0..1000).map(|i| i * 3).collect();
        assert_eq!(v.iter().sum::<u64>(), 1_498_500);
        assert_eq!(format!("{:x}", 48879), "beef");
    }
}
