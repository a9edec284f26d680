//! Resource usage of a container read from `/proc`, for rootless
//! containers that have no cgroup of their own to read it from: the
//! processes that share the container init's PID namespace, summed.

use std::path::Path;

use burrow_protocol::Metrics;

/// Clock ticks per second of `/proc/PID/stat` times.
fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// utime, stime, cutime and cstime of a `/proc/PID/stat` line (fields 14
/// to 17), in clock ticks.
fn cpu_ticks(stat: &str) -> Option<[u64; 4]> {
    // The command name may hold spaces and parentheses: fields follow the
    // last ')'. After it come field 3 (state) onwards.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let at = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some([at(14)?, at(15)?, at(16)?, at(17)?])
}

/// Usage of every process in the PID namespace of `init` (the container's
/// first process, as the host sees it): CPU time (with the reaped
/// children of init), resident memory, and the count.
pub(super) fn of_pid_namespace(init: i32) -> Metrics {
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let Some(target) = ns(&init.to_string()) else {
        return Metrics::default();
    };
    let page = {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(p).unwrap_or(4096)
    };
    let (mut ticks, mut rss, mut count) = (0u64, 0u64, 0u64);
    let entries = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    for entry in entries {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if ns(pid).as_ref() != Some(&target) {
            continue;
        }
        let dir = Path::new("/proc").join(pid);
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        if let Some([u, s, cu, cs]) = cpu_ticks(&stat) {
            ticks += u + s;
            if pid == init.to_string() {
                ticks += cu + cs;
            }
        }
        let statm = std::fs::read_to_string(dir.join("statm")).unwrap_or_default();
        if let Some(pages) = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u64>().ok())
        {
            rss += pages * page;
        }
        count += 1;
    }
    Metrics {
        cpu_usage_ns: Some(ticks * 1_000_000_000 / ticks_per_second()),
        memory_bytes: Some(rss),
        memory_limit_bytes: None,
        io_read_bytes: None,
        io_write_bytes: None,
        network: None,
        pids: Some(count),
        disk_bytes: None,
        disk_limit_bytes: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_follow_the_last_parenthesis() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 11 13 20 0 1 0 5 0 0";
        assert_eq!(cpu_ticks(stat), Some([7, 3, 11, 13]));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn this_process_is_counted_in_its_own_namespace() {
        let m = of_pid_namespace(std::process::id() as i32);
        assert!(m.pids.unwrap() >= 1);
        assert!(m.memory_bytes.unwrap() > 0);
        assert!(m.cpu_usage_ns.is_some());
    }
}
