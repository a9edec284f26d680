//! One launch of a VM: the machine's size and boot configuration, QEMU
//! started (fresh, or restored from a boot template or a hibernated
//! guest), the agent's channel connected.

use super::*;
use crate::engine::driver::net::NetStack;
use crate::engine::fault::Fault;

pub(super) async fn launch(spec: &LaunchSpec) -> Result<Launched> {
    let started = Instant::now();
    let qemu_bin = locate_qemu()?;
    let kernel = locate_kernel()?;
    let dir = &spec.runtime_dir;
    reclaim_stale(dir).await?;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io("creating the runtime directory", Some(dir), e))?;
    let choice = accel::choose(&qemu_bin, &kernel, &spec.agent_bin).await?;
    tracing::debug!(accel = choice.accel.as_str(), reason = %choice.reason, "acceleration");

    let root_disk = {
        let images_dir = spec.images_dir.clone();
        let image = spec.image.clone();
        tokio::task::spawn_blocking(move || {
            crate::engine::image::ext4::disk_image_in(&images_dir, &image)
        })
        .await
        .map_err(|e| Error::io("preparing the disks", None, std::io::Error::other(e)))??
    };
    // The data disk is made when it is first needed: a first start from
    // a template gets a copy of the template's instead of a new one.
    let data_disk = spec.sandbox_dir.join("vm").join(hibernate::DATA_DISK);
    let first_start = !crate::engine::image::ext4::is_ext4(&data_disk);
    let shares: Vec<Share> = spec
        .mounts
        .iter()
        .enumerate()
        .map(|(i, m)| Share {
            tag: share_tag(i),
            path: m.host_path.clone(),
            read_only: m.read_only,
        })
        .collect();
    let mut boot = boot_config(spec, &shares)?;
    let (memory_mb, cpus) = machine_size(&spec.config);
    let disk_bytes = data_disk_bytes(&spec.config);
    let mut notes = launch_notes(spec, cpus, &choice);
    let (log_read, log_write) =
        std::io::pipe().map_err(|e| Error::io("creating the console pipe", None, e))?;
    let console: OwnedFd = log_write.into();

    let mut record = StartRecord {
        from: StartKind::Cold,
        template: None,
        reason: None,
    };
    let files = TemplateFiles {
        qemu: &qemu_bin,
        kernel: &kernel,
        agent: &spec.agent_bin,
        root_disk: &root_disk,
    };
    // A hibernated guest is resumed if the configuration still gives its
    // machine; otherwise it is dropped and the sandbox starts afresh.
    // The window a concurrent stop's discard lands in: the run begun, the
    // saved guest not yet claimed.
    crate::engine::fault::hold(Fault::VmHibernateBeforeClaim).await;
    let mut saved = match hibernate::claim(&spec.sandbox_dir) {
        Ok(saved) => saved,
        Err(e) => {
            notes.push(format!("starting afresh: {e}"));
            None
        }
    };
    let from_template = match templates_wanted() {
        Err(reason) => Err(reason),
        Ok(()) => {
            let inputs = template_inputs(
                &files,
                choice.accel,
                memory_mb,
                cpus,
                disk_bytes,
                spec.config.network.is_enabled(),
                shares.len(),
            )?;
            let fresh = TemplateInputs {
                fresh_root: true,
                ..inputs.clone()
            };
            let (key, fresh_key) = (inputs.key(), fresh.key());
            let mut restored = Err(String::new());
            if let Some(claimed) = saved.take() {
                // Saved on the machine of either template.
                let machine = [&inputs, &fresh]
                    .into_iter()
                    .find(|i| i.key() == claimed.meta.template);
                if let (Some(machine), true) = (machine, shares.is_empty()) {
                    record.template = Some(claimed.meta.template.clone());
                    let console = dup(&console)?;
                    // Used at most once: what the restore did not consume
                    // is discarded.
                    let mut hibernated = Some(claimed);
                    restored = restore_template(
                        spec,
                        &files,
                        machine,
                        &data_disk,
                        &shares,
                        &boot,
                        console,
                        &mut hibernated,
                    )
                    .await
                    .map(|vm| (vm, StartKind::Hibernation))
                    .map_err(|e| e.to_string());
                    if let Some(left) = hibernated {
                        let _ = left.consume();
                    }
                    if let Err(e) = &restored {
                        tracing::warn!(error = %e, "the hibernated guest could not be restored; starting afresh");
                        notes.push(format!(
                            "starting afresh: the hibernated guest could not be restored: {e}"
                        ));
                    }
                } else {
                    notes.push(
                        "starting afresh: the hibernated guest was saved with another configuration"
                            .into(),
                    );
                    let _ = claimed.consume();
                }
            } else if first_start {
                // No disk yet: the template of first starts gives it one
                // with its root already set up.
                record.template = Some(fresh_key);
                restored =
                    first_start_restore(spec, &files, &fresh, &data_disk, &shares, &boot, &console)
                        .await
                        .map(|vm| (vm, StartKind::Template))
                        .map_err(|e| e.to_string());
                if let Err(e) = &restored {
                    tracing::warn!(error = %e, "the template of first starts could not be used");
                    notes.push(format!(
                        "the template of first starts could not be used: {e}"
                    ));
                }
            }
            match restored {
                Ok(vm) => Ok(vm),
                Err(_) => {
                    record.template = Some(key);
                    let console = dup(&console)?;
                    async {
                        prepare_data_disk(&data_disk, disk_bytes).await?;
                        restore_template(
                            spec, &files, &inputs, &data_disk, &shares, &boot, console, &mut None,
                        )
                        .await
                    }
                    .await
                    .map(|vm| (vm, StartKind::Template))
                    .map_err(|e| e.to_string())
                }
            }
        }
    };
    if let Some(claimed) = saved {
        notes.push(
            "starting afresh: boot templates are off, so the hibernated guest cannot be restored"
                .into(),
        );
        let _ = claimed.consume();
    }
    let vm = match from_template {
        Ok((vm, kind)) => {
            record.from = kind;
            vm
        }
        Err(reason) => {
            if record.template.is_some() {
                tracing::warn!(%reason, "the boot template could not be used; booting cold");
                notes.push(format!(
                    "booted cold: the boot template could not be used: {reason}"
                ));
            }
            record.reason = Some(reason);
            prepare_data_disk(&data_disk, disk_bytes).await?;
            boot.clock = Some(WallClock::now());
            let boot_json = serde_json::to_vec(&boot)
                .map_err(|e| Error::io("encoding the boot configuration", None, e.into()))?;
            let agent = std::fs::read(&spec.agent_bin)
                .map_err(|e| Error::io("reading the guest agent", Some(&spec.agent_bin), e))?;
            let initramfs = dir.join("initramfs.cpio");
            initramfs::write(&initramfs, &agent, &boot_json)?;
            tracing::debug!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "disks and initramfs ready"
            );
            let machine = Machine {
                kernel: &kernel,
                initramfs: &initramfs,
                root_disk: Some(&root_disk),
                data_disk: Some(&data_disk),
                accel: choice.accel,
                cpus,
                memory_mb,
                network: spec.config.network.is_enabled(),
                shares: &shares,
                agent_fd: None,
                net_fd: None,
                qmp_fd: None,
                start_paused: crate::engine::fault::enabled(Fault::VmStartPaused),
                tsc_khz: qemu::host_tsc_khz(),
                memory_file: None,
                incoming: false,
                template: None,
                layer: false,
            };
            match start_qemu(
                &qemu_bin,
                machine,
                spec.inherit_fds.clone(),
                console,
                Owner::Sandbox(dir),
            )
            .await
            {
                Ok(vm) => vm,
                Err(e) => {
                    let _ = clear_runtime_dir(dir);
                    return Err(e);
                }
            }
        }
    };
    write_start_record(dir, &record);
    let log = tokio::net::unix::pipe::Receiver::from_owned_fd(log_read.into())
        .map_err(|e| Error::io("reading the console pipe", None, e))?;
    tracing::info!(
        accel = choice.accel.as_str(),
        cpus,
        memory_mb,
        from = record.from.as_str(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "VM started"
    );
    let hibernation = match (&record.template, record.from) {
        _ if !shares.is_empty() => Err(
            "a host directory is shared into the VM (QEMU cannot save a mounted 9p share)".into(),
        ),
        (Some(key), StartKind::Template | StartKind::Hibernation) => Ok(hibernate::Target {
            vm_dir: spec.sandbox_dir.join("vm"),
            template: key.clone(),
        }),
        _ => Err(format!(
            "the VM was booted cold ({}), not restored from a boot template",
            record.reason.as_deref().unwrap_or("no template")
        )),
    };
    // The guest's frames go through the sandbox's stack, which enforces
    // its policy (QEMU's own user-mode network is not used).
    let network = vm.net.map(|link| {
        NetStack::start(
            burrow_net::stack::stream_link(link, burrow_net::addrs::MTU),
            &spec.config.network,
            spec.config.egress_ceiling.as_ref(),
            spec.sandbox_id.as_str(),
            spec.secrets.clone(),
        )
    });
    let (reader, writer) = vm.agent.into_split();
    Ok(Launched {
        guest: Box::new(VmGuest::new(
            vm.child,
            vm.qmp,
            dir.clone(),
            memory_mb,
            data_disk.clone(),
            hibernation,
            network,
        )),
        reader: Box::new(reader),
        writer: Box::new(writer),
        log: Some(Box::new(log)),
        notes,
    })
}

/// The VM's memory (MiB) and whole vCPUs for `config`.
pub(super) fn machine_size(config: &crate::model::SandboxConfig) -> (u64, u32) {
    let memory_mb = config.memory_mb.unwrap_or(DEFAULT_MEMORY_MB);
    let cpus = config
        .cpus
        .map(|c| c.ceil().clamp(1.0, MAX_CPUS as f64) as u32)
        .unwrap_or(1);
    (memory_mb, cpus)
}

/// The 9p tag of the `i`th share.
pub(super) fn share_tag(i: usize) -> String {
    format!("burrow{i}")
}

/// The notes of a launch, for the sandbox log.
pub(super) fn launch_notes(spec: &LaunchSpec, cpus: u32, choice: &AccelChoice) -> Vec<String> {
    let mut notes = Vec::new();
    if spec.config.cpus.is_some_and(|c| c.fract() != 0.0) {
        notes.push(format!(
            "the VM has {cpus} whole vCPU(s): fractional CPU limits are rounded up"
        ));
    }
    if spec.config.pids_limit.is_some() {
        notes.push("pids_limit is not enforced inside a VM".into());
    }
    if choice.accel == Accel::Tcg {
        notes.push(format!(
            "running under TCG (software emulation): {}",
            choice.reason
        ));
    }
    notes
}

/// A second descriptor of the console pipe (each QEMU tried gets one).
pub(super) fn dup(console: &OwnedFd) -> Result<OwnedFd> {
    console
        .try_clone()
        .map_err(|e| Error::io("duplicating the console pipe", None, e))
}

/// A QEMU just started, its monitor connected.
pub(super) struct Started {
    pub(super) child: tokio::process::Child,
    pub(super) qmp: qmp::Qmp,
    pub(super) agent: tokio::net::UnixStream,
    /// The network card's link (a machine with one): the sandbox's stack
    /// serves it; a template build just holds it.
    pub(super) net: Option<tokio::net::UnixStream>,
}

impl Started {
    pub(super) async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// Whose QEMU is started.
#[derive(Debug, Clone, Copy)]
pub(super) enum Owner<'a> {
    /// A sandbox's generation, whose runtime directory records the process
    /// at once (a later start or removal kills it if this supervisor dies
    /// at any point after the spawn). It outlives the supervisor: the
    /// agent powers the VM off when its channel closes.
    Sandbox(&'a Path),
    /// A template build: it dies with the process that builds it.
    Builder,
}

/// Starts QEMU for `machine` with fresh agent and QMP channels (their
/// descriptors are filled in here), `inherit` open in it too, the console
/// on `console`; connects the monitor. A QEMU that fails that far is
/// killed.
pub(super) async fn start_qemu(
    qemu_bin: &Path,
    mut machine: Machine<'_>,
    mut inherit: Vec<RawFd>,
    console: OwnedFd,
    owner: Owner<'_>,
) -> Result<Started> {
    let (agent_host, agent_guest) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| Error::io("creating the agent channel", None, e))?;
    let (qmp_host, qmp_guest) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| Error::io("creating the QMP channel", None, e))?;
    let net = if machine.network {
        let (host, guest) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| Error::io("creating the network link", None, e))?;
        machine.net_fd = Some(guest.as_raw_fd());
        inherit.push(guest.as_raw_fd());
        Some((host, guest))
    } else {
        None
    };
    machine.agent_fd = Some(agent_guest.as_raw_fd());
    machine.qmp_fd = Some(qmp_guest.as_raw_fd());
    inherit.extend([agent_guest.as_raw_fd(), qmp_guest.as_raw_fd()]);
    let die_with_parent = matches!(owner, Owner::Builder);
    let mut child = spawn_qemu(qemu_bin, &machine, inherit, Some(console), die_with_parent).await?;
    if let (Owner::Sandbox(dir), Some(pid)) = (owner, child.id()) {
        record_process(dir, pid);
    }
    // Only QEMU holds the guest ends now: when it exits, ours see EOF.
    drop((agent_guest, qmp_guest));
    let net = net.map(|(host, guest)| {
        drop(guest);
        host
    });
    let setup = async {
        let qmp = qmp::Qmp::handshake(to_tokio(qmp_host)?).await?;
        let net = net.map(to_tokio).transpose()?;
        Ok::<_, Error>((qmp, to_tokio(agent_host)?, net))
    };
    match setup.await {
        Ok((qmp, agent, net)) => Ok(Started {
            child,
            qmp,
            agent,
            net,
        }),
        Err(e) => {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            Err(e)
        }
    }
}

pub(super) fn to_tokio(s: std::os::unix::net::UnixStream) -> Result<tokio::net::UnixStream> {
    s.set_nonblocking(true)
        .and_then(|()| tokio::net::UnixStream::from_std(s))
        .map_err(|e| Error::io("registering a QEMU channel", None, e))
}

/// Starts QEMU with `inherit` open in it (everything else stays
/// close-on-exec); the serial console and QEMU's own messages go to
/// `console` (None: discarded).
pub(super) async fn spawn_qemu(
    qemu: &Path,
    machine: &Machine<'_>,
    inherit: Vec<RawFd>,
    console: Option<OwnedFd>,
    die_with_parent: bool,
) -> Result<tokio::process::Child> {
    let mut cmd = std::process::Command::new(qemu);
    cmd.args(machine.args()).stdin(Stdio::null());
    match console {
        None => {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
        Some(fd) => {
            // One pipe for both: the serial console writes to stdout, QEMU's
            // own errors to stderr.
            let copy = dup(&fd)?;
            cmd.stdout(Stdio::from(fd)).stderr(Stdio::from(copy));
        }
    }
    // A sandbox's QEMU gets no parent-death signal: if the supervisor
    // dies, the agent sees its port close and powers the VM off after
    // syncing; QEMU (holding the runtime lock) exits only then.
    crate::engine::driver::container::bind_to_parent(&mut cmd, inherit, die_with_parent);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    crate::engine::driver::container::spawn_long_lived(cmd)
        .await
        .map_err(|e| qemu::unavailable(format!("starting {}: {e}", qemu.display())))
}

/// The agent's boot configuration for this launch.
pub(super) fn boot_config(spec: &LaunchSpec, shares: &[Share]) -> Result<VmBoot> {
    use crate::engine::driver::container::{spec as oci, users};
    let image = &spec.image;
    let hostname = oci::hostname(&spec.name);
    let (uid, gid) = users::resolve(
        &image.rootfs,
        image.config.user.as_deref(),
        &image.reference,
    )?;
    let env = oci::environment(&image.config, &spec.config, &hostname)
        .into_iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect();
    Ok(VmBoot {
        root_serial: qemu::ROOT_SERIAL.into(),
        data_serial: qemu::DATA_SERIAL.into(),
        channel: qemu::AGENT_PORT.into(),
        hosts: format!(
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
        ),
        hostname,
        env,
        cwd: oci::working_dir(&spec.config, &image.config, &image.reference)?,
        uid,
        gid,
        resolv_conf: spec
            .config
            .network
            .is_enabled()
            .then(|| format!("nameserver {}\n", qemu::GUEST_DNS)),
        mounts: shares
            .iter()
            .zip(&spec.mounts)
            .map(|(s, m)| VmMount {
                tag: s.tag.clone(),
                target: m.target.clone(),
                read_only: m.read_only,
            })
            .collect(),
        machine_id: Some(machine_id(&spec.sandbox_id)),
        clock: None,
    })
}

/// The guest's `/etc/machine-id`: derived from the sandbox id, so it is
/// the same across the sandbox's restarts and differs between sandboxes.
pub(super) fn machine_id(id: &crate::model::SandboxId) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(format!("burrow machine-id {}", id.as_str()))[..16])
}
