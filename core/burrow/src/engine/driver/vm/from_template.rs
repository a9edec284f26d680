//! Starts from boot templates: warming a template ahead of time, building
//! the one a first start needs, and restoring a new guest from it.

use super::*;
use crate::engine::fault::Fault;

/// The boot templates made (or found) ahead of the first start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WarmTemplate {
    /// The key of the template a first start restores (its directory under
    /// `images/vm-templates/`).
    pub key: String,
    /// The key of the template later starts restore.
    pub restart_key: String,
    /// Whether this call built either (false: both existed).
    pub built: bool,
}

/// Makes the boot templates that a vm sandbox of `config` (its image,
/// memory, CPUs, network and number of mounts) would start from, unless
/// they exist: the one of first starts and the one of later starts.
/// `burrow image warm`, so that even the first start restores.
pub async fn warm_template(
    home: &crate::engine::paths::Home,
    config: &crate::model::SandboxConfig,
) -> Result<WarmTemplate> {
    templates_wanted().map_err(qemu::unavailable)?;
    let qemu_bin = locate_qemu()?;
    let kernel = locate_kernel()?;
    let agent = crate::engine::procs::locate_agent()?.path;
    let choice = accel::choose(&qemu_bin, &kernel, &agent).await?;
    let image =
        crate::engine::image::prepare_under(home, &config.image, config.egress_ceiling.as_ref())
            .await?;
    let images_dir = home.images_dir();
    let root_disk = {
        let images_dir = images_dir.clone();
        tokio::task::spawn_blocking(move || {
            crate::engine::image::ext4::disk_image_in(&images_dir, &image)
        })
        .await
        .map_err(|e| Error::io("preparing the disk", None, std::io::Error::other(e)))??
    };
    let files = TemplateFiles {
        qemu: &qemu_bin,
        kernel: &kernel,
        agent: &agent,
        root_disk: &root_disk,
    };
    let (memory_mb, cpus) = machine_size(config);
    let inputs = template_inputs(
        &files,
        choice.accel,
        memory_mb,
        cpus,
        data_disk_bytes(config),
        config.network.is_enabled(),
        config.mounts.len(),
    )?;
    let fresh = TemplateInputs {
        fresh_root: true,
        ..inputs.clone()
    };
    let mut built = false;
    for inputs in [&fresh, &inputs] {
        built |= !templates_dir(&images_dir).join(inputs.key()).is_dir();
        ensure_template(&images_dir, &files, inputs).await?;
    }
    Ok(WarmTemplate {
        key: fresh.key(),
        restart_key: inputs.key(),
        built,
    })
}

/// Environment variable that turns boot templates off (`0`).
pub const TEMPLATES_ENV: &str = "BURROW_VM_TEMPLATES";

/// Whether launches restore boot templates (Err: why not).
pub(super) fn templates_wanted() -> std::result::Result<(), String> {
    if std::env::var(TEMPLATES_ENV).is_ok_and(|v| v == "0") {
        return Err(format!("boot templates are off ({TEMPLATES_ENV}=0)"));
    }
    if crate::engine::fault::enabled(Fault::VmStartPaused) {
        return Err(format!(
            "the {} fault point is on",
            Fault::VmStartPaused.as_str()
        ));
    }
    Ok(())
}

/// The files a template is made of and restored with.
pub(super) struct TemplateFiles<'a> {
    pub(super) qemu: &'a Path,
    pub(super) kernel: &'a Path,
    pub(super) agent: &'a Path,
    pub(super) root_disk: &'a Path,
}

pub(super) fn template_inputs(
    files: &TemplateFiles<'_>,
    accel: Accel,
    memory_mb: u64,
    cpus: u32,
    data_disk_bytes: u64,
    network: bool,
    shares: usize,
) -> Result<TemplateInputs> {
    Ok(TemplateInputs {
        format: template::FORMAT,
        image_key: files
            .root_disk
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        image_disk: FileId::of(files.root_disk)?,
        kernel: FileId::of(files.kernel)?,
        agent: FileId::of(files.agent)?,
        qemu: FileId::of(files.qemu)?,
        accel,
        tsc_khz: qemu::host_tsc_khz(),
        memory_mb,
        cpus,
        data_disk_bytes,
        network,
        shares,
        fresh_root: false,
    })
}

/// The boot configuration a template is built with: its disks and channel,
/// nothing of a sandbox. The `/etc` files are placeholders of those every
/// sandbox of the template writes (a template of first starts writes them,
/// so that a sandbox's own replace files of the data disk).
pub(super) fn template_boot(network: bool) -> VmBoot {
    VmBoot {
        root_serial: qemu::ROOT_SERIAL.into(),
        data_serial: qemu::DATA_SERIAL.into(),
        channel: qemu::AGENT_PORT.into(),
        // Placeholders no shorter than any sandbox's files and no longer
        // (the guest then rewrites them without truncating): one
        // character, one line, and a machine id of the same length.
        hostname: "x".into(),
        env: Default::default(),
        cwd: "/".into(),
        uid: 0,
        gid: 0,
        hosts: "\n".into(),
        resolv_conf: network.then(|| "\n".into()),
        mounts: Vec::new(),
        machine_id: Some("0".repeat(32)),
        clock: None,
    }
}

/// The template for `inputs`, built first if there is none.
pub(super) async fn ensure_template(
    images_dir: &Path,
    files: &TemplateFiles<'_>,
    inputs: &TemplateInputs,
) -> Result<template::Template> {
    template::ensure(
        images_dir,
        inputs,
        &template::Ingredients {
            qemu: files.qemu,
            kernel: files.kernel,
            agent: files.agent,
            root_disk: files.root_disk,
            boot: &template_boot(inputs.network),
            data_disk_bytes: inputs.data_disk_bytes,
        },
    )
    .await
}

/// A sandbox's first start from the template of first starts (`fresh`,
/// built first if there is none): a copy of the template's data disk
/// becomes the sandbox's, then the guest is restored.
#[allow(clippy::too_many_arguments)]
pub(super) async fn first_start_restore(
    spec: &LaunchSpec,
    files: &TemplateFiles<'_>,
    fresh: &TemplateInputs,
    data_disk: &Path,
    shares: &[Share],
    boot: &VmBoot,
    console: &OwnedFd,
) -> Result<Started> {
    let template = ensure_template(&spec.images_dir, files, fresh).await?;
    let to = data_disk.to_path_buf();
    tokio::task::spawn_blocking(move || template.copy_data_disk(&to))
        .await
        .map_err(|e| Error::io("copying the data disk", None, std::io::Error::other(e)))??;
    restore_template(
        spec,
        files,
        fresh,
        data_disk,
        shares,
        boot,
        dup(console)?,
        &mut None,
    )
    .await
}

/// Starts the guest from its template (built first if there is none):
/// QEMU with the template's machine and this sandbox's disk, shares and
/// channels, the saved state brought in (the template's, or the
/// `hibernated` guest's, taken and consumed once it is loaded, before the
/// guest runs; left to the caller to discard on an earlier failure), and
/// the agent handed the sandbox's identity, fresh entropy and the time.
#[allow(clippy::too_many_arguments)]
pub(super) async fn restore_template(
    spec: &LaunchSpec,
    files: &TemplateFiles<'_>,
    inputs: &TemplateInputs,
    data_disk: &Path,
    shares: &[Share],
    boot: &VmBoot,
    console: OwnedFd,
    hibernated: &mut Option<hibernate::Claimed>,
) -> Result<Started> {
    let size = std::fs::metadata(data_disk)
        .map_err(|e| Error::io("reading the writable disk", Some(data_disk), e))?
        .len();
    if size != inputs.data_disk_bytes {
        return Err(qemu::unavailable(format!(
            "the writable disk has {size} bytes, not the template's {}",
            inputs.data_disk_bytes
        )));
    }
    let template = ensure_template(&spec.images_dir, files, inputs).await?;
    let (ram, initramfs) = (template.ram(), template.initramfs());
    // The state QEMU restores, inherited by it.
    let state = StateFd::open(&match hibernated {
        Some(saved) => saved.state(),
        None => template.state(),
    })?;
    let mut inherit = spec.inherit_fds.clone();
    inherit.push(state.raw());
    let machine = template::machine(
        files.kernel,
        &initramfs,
        files.root_disk,
        data_disk,
        inputs,
        shares,
        &ram,
        true,
    );
    let mut vm = start_qemu(
        files.qemu,
        machine,
        inherit,
        console,
        Owner::Sandbox(&spec.runtime_dir),
    )
    .await?;
    let resumed = async {
        // On an error a hibernated state is still `hibernated`'s, which
        // the caller discards.
        vm.qmp.load_state(&state, hibernated.is_none()).await?;
        drop(state);
        if let Some(saved) = hibernated.take() {
            // Loaded, never run: a start killed here leaves the claimed
            // state, which the next start restores.
            crate::engine::fault::point(Fault::VmHibernateLoaded);
            saved.consume()?;
        }
        let mut entropy = rand::random::<[u8; 32]>().to_vec();
        entropy.extend(rand::random::<[u8; 32]>());
        let mut boot = boot.clone();
        boot.clock = Some(WallClock::now());
        let frame = burrow_protocol::encode(&VmResume {
            boot,
            entropy: entropy.into(),
        });
        // Written before the guest runs: waiting in the channel, it is
        // the first thing the guest reads.
        tokio::io::AsyncWriteExt::write_all(&mut vm.agent, &frame)
            .await
            .map_err(|e| qemu::unavailable(format!("handing the guest its identity: {e}")))?;
        vm.qmp.execute("cont").await.map(drop)
    };
    if let Err(e) = resumed.await {
        vm.kill().await;
        return Err(e);
    }
    tracing::debug!(template = %template.key, "restored from the boot template");
    Ok(vm)
}
