//! The writable layer of a vm sandbox that is not running, read by a guest
//! of its own disk (a *layer boot*, see [`burrow_protocol::vm`]).
//!
//! The layer is the overlay's `upper/` on the sandbox's ext4 data disk,
//! with the overlay's own markers (whiteouts, opaque directories in
//! `trusted.*` attributes) and the guest's owners: the host reads none of
//! that without root and an ext4 mount. The guest kernel does: QEMU boots
//! the agent with the data disk alone (writes to it go to a throwaway
//! overlay, so even a journal replay leaves the sandbox's disk as it is),
//! the agent mounts it read-only and streams the upper directory as the
//! same OCI layer a running guest writes (`WriteLayer`), and the VM is
//! killed. Nothing of the sandbox runs; its records are not touched.

use burrow_protocol::{GuestError, GuestErrorCode, GuestMsg, Request};

use super::*;
use crate::channel::client::{AgentClient, ConnectError, Handshake};
use crate::engine::image::digest::{Digest, HashingWriter};

/// Memory of a layer boot's guest, in MiB: the agent and the kernel's
/// caches of the disk it reads.
const LAYER_BOOT_MEMORY_MB: u64 = 256;
/// How long a layer boot's guest has to say hello (a cold boot under
/// emulation takes seconds).
const HELLO_TIMEOUT: Duration = Duration::from_secs(120);

/// Writes the writable layer of the vm sandbox in `sandbox_dir` (not
/// running: the caller holds its transition lock) to `out`, a new file.
/// Returns the layer's digest and size.
pub async fn write_stopped_layer(sandbox_dir: &Path, out: &Path) -> Result<(Digest, u64)> {
    let data_disk = sandbox_dir.join("vm").join(hibernate::DATA_DISK);
    if !crate::engine::image::ext4::is_ext4(&data_disk) {
        // Never started: nothing was written.
        return empty_layer(out).await;
    }
    let qemu_bin = locate_qemu()?;
    let kernel = locate_kernel()?;
    let agent_bin = crate::engine::procs::agent_bin()
        .ok_or_else(|| qemu::unavailable("the guest agent binary was not found".into()))?;
    let choice = accel::choose(&qemu_bin, &kernel, &agent_bin).await?;
    let initramfs = out.with_extension("initramfs");
    let console_log = out.with_extension("console");
    let _cleanup = RemoveOnDrop([initramfs.clone(), console_log.clone()]);
    let boot = VmBoot {
        root_serial: qemu::ROOT_SERIAL.into(),
        data_serial: qemu::DATA_SERIAL.into(),
        channel: qemu::AGENT_PORT.into(),
        hostname: "burrow-layer".into(),
        env: Default::default(),
        cwd: "/".into(),
        uid: 0,
        gid: 0,
        hosts: String::new(),
        resolv_conf: None,
        mounts: Vec::new(),
        machine_id: None,
        clock: None,
    };
    let boot_json = serde_json::to_vec(&boot)
        .map_err(|e| Error::io("encoding the boot configuration", None, e.into()))?;
    let agent = std::fs::read(&agent_bin)
        .map_err(|e| Error::io("reading the guest agent", Some(&agent_bin), e))?;
    initramfs::write(&initramfs, &agent, &boot_json)?;
    let console: OwnedFd = std::fs::File::create(&console_log)
        .map_err(|e| Error::io("creating the console log", Some(&console_log), e))?
        .into();
    let machine = Machine {
        kernel: &kernel,
        initramfs: &initramfs,
        root_disk: None,
        data_disk: Some(&data_disk),
        accel: choice.accel,
        cpus: 1,
        memory_mb: LAYER_BOOT_MEMORY_MB,
        network: false,
        shares: &[],
        agent_fd: None,
        net_fd: None,
        qmp_fd: None,
        start_paused: false,
        tsc_khz: qemu::host_tsc_khz(),
        memory_file: None,
        incoming: false,
        template: None,
        layer: true,
    };
    let Started {
        mut child,
        qmp: _monitor,
        agent,
        ..
    } = start_qemu(&qemu_bin, machine, Vec::new(), console, Owner::Builder).await?;
    let written = async {
        let (reader, writer) = agent.into_split();
        let client = AgentClient::connect(reader, writer, Handshake::client(None), HELLO_TIMEOUT)
            .await
            .map_err(|e| {
                let why = match e {
                    ConnectError::Refused(g) => g.message,
                    ConnectError::Other(e) => e.to_string(),
                };
                let log = std::fs::read_to_string(&console_log).unwrap_or_default();
                Error::io(
                    "booting the guest that reads the stopped sandbox's disk",
                    None,
                    std::io::Error::other(format!("{why}; console: {}", tail(&log))),
                )
            })?;
        receive_layer(&client, out)
            .await
            .map_err(|failure| Error::Guest {
                operation: "snapshot".into(),
                failure: crate::error::GuestFailure(failure),
            })
    }
    .await;
    // Nothing of it is kept: its writes went to a throwaway overlay.
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    if written.is_err() {
        let _ = std::fs::remove_file(out);
    }
    written
}

/// Streams the layer the guest's agent writes (`WriteLayer`) into `out`
/// (a new file), hashed as it comes, and syncs it. Returns its digest and
/// size.
pub(crate) async fn receive_layer(
    agent: &AgentClient,
    out: &Path,
) -> std::result::Result<(Digest, u64), GuestError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |e: std::io::Error| GuestError::new(GuestErrorCode::Io, e.to_string());
    let mut handle = agent
        .request(Request::WriteLayer)
        .map_err(|e| GuestError::new(GuestErrorCode::Unavailable, e.to_string()))?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(io)?;
    let mut writer = HashingWriter::new(std::io::BufWriter::with_capacity(1 << 20, file));
    loop {
        match handle.next().await {
            Some(GuestMsg::Stdout { data, .. }) => {
                tokio::task::block_in_place(|| writer.write_all(&data.0)).map_err(io)?;
            }
            Some(GuestMsg::Response { result, .. }) => {
                result?;
                break;
            }
            Some(_) => {}
            None => {
                return Err(GuestError::new(
                    GuestErrorCode::Unavailable,
                    "the guest went away while it wrote its layer",
                ))
            }
        }
    }
    let (digest, size, buf) = writer.finish();
    tokio::task::block_in_place(|| {
        buf.into_inner()
            .map_err(std::io::IntoInnerError::into_error)?
            .sync_all()
    })
    .map_err(io)?;
    Ok((digest, size))
}

/// The layer of an empty upper directory.
async fn empty_layer(out: &Path) -> Result<(Digest, u64)> {
    let out = out.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let empty = out.with_extension("empty");
        let _ = std::fs::remove_dir(&empty);
        std::fs::create_dir(&empty)
            .map_err(|e| Error::io("creating an empty directory", Some(&empty), e))?;
        let written = crate::engine::image::snapshot::write_file_hashed(&out, |w| {
            burrow_layer::write_layer(&empty, burrow_layer::Owners { shift: 0 }, w).map(drop)
        })
        .map_err(|e| Error::io("writing the snapshot layer", Some(&out), e));
        let _ = std::fs::remove_dir(&empty);
        written
    })
    .await
    .map_err(|e| Error::io("writing the snapshot layer", None, std::io::Error::other(e)))?
}

/// The last lines of a console log, for an error.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Removes its files when dropped.
struct RemoveOnDrop<const N: usize>([PathBuf; N]);

impl<const N: usize> Drop for RemoveOnDrop<N> {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}
