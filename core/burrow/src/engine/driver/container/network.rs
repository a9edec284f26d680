//! A container's network: a veth pair into its network namespace, whose
//! other end is read by the sandbox's stack (burrow-net) in this process.
//!
//! The link is made by the supervisor program's `__link PID FD` entry: a
//! process of its own, because it must enter the container's user
//! namespace (rootless), which a multi-threaded process cannot. It hands
//! the packet socket back over a socket pair and exits.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use burrow_net::Network;

use crate::engine::driver::net::NetStack;
use crate::error::{Error, Result};

use super::oci::bind_to_parent;

/// Bound on making the link.
const LINK_TIMEOUT: Duration = Duration::from_secs(10);

fn unavailable(reason: String) -> Error {
    Error::Runtime {
        runtime: "network".into(),
        reason,
    }
}

/// Gives the container of `pid` its link and starts its stack with the
/// rules of `network`.
pub(super) async fn attach(
    pid: i32,
    network: &Network,
    ceiling: Option<&burrow_net::Ceiling>,
    sandbox: &str,
    secrets: Option<std::sync::Arc<burrow_net::secrets::Secrets>>,
) -> Result<NetStack> {
    let program = crate::engine::procs::helper_bin().ok_or_else(|| {
        unavailable("a sandbox's network needs the supervisor program, which was not found".into())
    })?;
    let (ours, theirs) =
        UnixStream::pair().map_err(|e| Error::io("making the link's socket pair", None, e))?;
    let mut cmd = std::process::Command::new(&program);
    cmd.arg("__link")
        .arg(pid.to_string())
        .arg(theirs.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    bind_to_parent(&mut cmd, vec![theirs.as_raw_fd()], true);
    let child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::io("running the supervisor to make the link", Some(&program), e))?;
    drop(theirs);
    let out = tokio::time::timeout(LINK_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| unavailable(format!("making the link took over {LINK_TIMEOUT:?}")))?
        .map_err(|e| Error::io("making the link", Some(&program), e))?;
    if !out.status.success() {
        return Err(unavailable(format!(
            "making the link failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let fd = burrow_net::link::recv_fd(ours.as_raw_fd())
        .map_err(|e| Error::io("receiving the link", None, e))?;
    let link = burrow_net::stack::packet_link(fd, burrow_net::addrs::MTU)
        .map_err(|e| Error::io("reading the link", None, e))?;
    Ok(NetStack::start(link, network, ceiling, sandbox, secrets))
}

/// `__link PID FD`: makes the link into the network namespace of `pid`
/// and sends it over the socket `fd`. Single-threaded (it enters user
/// namespaces).
pub fn make_and_send_link(pid: i32, sock: i32) -> std::io::Result<()> {
    let link = burrow_net::link::make_link(pid)?;
    burrow_net::link::send_fd(sock, link.as_raw_fd())
}

/// The guest's resolv.conf: the stack's DNS server.
pub(super) fn resolv_conf() -> String {
    format!("nameserver {}\n", burrow_net::addrs::DNS)
}
