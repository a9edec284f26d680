//! Outbound user-mode networking for a container: pasta (from passt)
//! attached to the container's network namespace.
//!
//! pasta creates a tap device in the namespace, copies the host's addresses
//! and routes onto it and relays traffic through ordinary host sockets, so
//! no host firewall or bridge is touched. No inbound port is forwarded and
//! the host's loopback is not reachable through the gateway address
//! (`--no-map-gw`): published ports go through the agent channel instead.
//! pasta runs as a child of the supervisor (dies with it) and is stopped by
//! cleanup; it does not notice the namespace going away by itself.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

use super::oci::{bind_to_parent, find_on_path, spawn_long_lived};

/// Bound on pasta configuring the namespace.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

/// A running pasta.
#[derive(Debug)]
pub(super) struct Network {
    child: tokio::process::Child,
}

impl Network {
    /// Starts pasta on the network namespace of `pid` and waits until the
    /// namespace has a default route.
    pub(super) async fn attach(pid: i32, log: &Path) -> Result<Network> {
        let unavailable = |reason: String| Error::Runtime {
            runtime: "pasta".into(),
            reason,
        };
        let binary = match std::env::var_os("BURROW_PASTA").filter(|v| !v.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => find_on_path("pasta").ok_or_else(|| {
                unavailable("network access needs `pasta` (Debian/Ubuntu package `passt`), which was not found on PATH".into())
            })?,
        };
        let log_file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io("opening the network helper log", Some(log), e))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| Error::io("opening the network helper log", Some(log), e))?;
        let mut cmd = std::process::Command::new(&binary);
        cmd.args([
            "--foreground",
            "--quiet",
            // As root, pasta would switch to nobody before opening the
            // namespace files and fail.
            "--runas",
            "0:0",
            "--config-net",
            "--no-map-gw",
            "--tcp-ports",
            "none",
            "--udp-ports",
            "none",
            "--tcp-ns",
            "none",
            "--udp-ns",
            "none",
        ])
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(log_err));
        bind_to_parent(&mut cmd, Vec::new(), true);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let child = spawn_long_lived(cmd)
            .await
            .map_err(|e| unavailable(format!("starting {}: {e}", binary.display())))?;
        let mut net = Network { child };
        let started = Instant::now();
        loop {
            if has_default_route(pid) {
                tracing::debug!(
                    pid,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "network attached"
                );
                return Ok(net);
            }
            if let Ok(Some(status)) = net.child.try_wait() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                return Err(unavailable(format!(
                    "pasta exited ({status}) before configuring the network: {}",
                    last_lines(&text)
                )));
            }
            if started.elapsed() > ATTACH_TIMEOUT {
                net.stop().await;
                return Err(unavailable(format!(
                    "pasta did not configure the network within {ATTACH_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops pasta. Idempotent.
    pub(super) async fn stop(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// Whether the namespace of `pid` has an IPv4 or IPv6 default route.
fn has_default_route(pid: i32) -> bool {
    let v4 = std::fs::read_to_string(format!("/proc/{pid}/net/route")).unwrap_or_default();
    let v4_default = v4.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 7 && f[1] == "00000000" && f[7] == "00000000"
    });
    let v6 = std::fs::read_to_string(format!("/proc/{pid}/net/ipv6_route")).unwrap_or_default();
    let v6_default = v6.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 9 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" && f[9] != "lo"
    });
    v4_default || v6_default
}

fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join("; ");
    if tail.is_empty() {
        "no output".into()
    } else {
        tail
    }
}

/// A resolv.conf for the guest with the host's non-loopback name servers
/// (a loopback resolver on the host is not reachable from the guest).
/// `None` when the host has none.
pub(super) fn resolv_conf(host_resolv: &str) -> Option<String> {
    let mut servers = Vec::new();
    let mut rest = Vec::new();
    for line in host_resolv.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => {
                if let Some(addr) = words
                    .next()
                    .and_then(|a| a.parse::<std::net::IpAddr>().ok())
                {
                    if !addr.is_loopback() {
                        servers.push(format!("nameserver {addr}"));
                    }
                }
            }
            Some("search") | Some("options") => rest.push(line.trim().to_owned()),
            _ => {}
        }
    }
    if servers.is_empty() {
        return None;
    }
    servers.extend(rest);
    Some(servers.join("\n") + "\n")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_drops_loopback_servers() {
        assert_eq!(resolv_conf("nameserver 127.0.0.53\noptions edns0\n"), None);
        assert_eq!(
            resolv_conf("# x\nnameserver 10.0.0.1\nnameserver ::1\nsearch lan\n").as_deref(),
            Some("nameserver 10.0.0.1\nsearch lan\n")
        );
    }
}
