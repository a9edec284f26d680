//! The QEMU command line of a microVM, and where QEMU and the guest kernel
//! are found.

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// `-sandbox`: QEMU's seccomp filter with everything it can deny denied.
pub(super) const SANDBOX: &str =
    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// Name of the virtio console port carrying the protocol.
pub(super) const AGENT_PORT: &str = "burrow.agent";
/// Serial number of the image disk.
pub(super) const ROOT_SERIAL: &str = "burrow-root";
/// Serial number of the writable disk.
pub(super) const DATA_SERIAL: &str = "burrow-data";

/// The guest's address and gateway on the link to the sandbox's network
/// stack (burrow-net, the container driver's layout).
pub(super) const GUEST_IP: std::net::Ipv4Addr = burrow_net::addrs::GUEST_IP;
const GATEWAY: std::net::Ipv4Addr = burrow_net::addrs::GATEWAY;
/// The stack's DNS server.
pub(super) const GUEST_DNS: std::net::Ipv4Addr = burrow_net::addrs::DNS;

/// How the guest's CPU is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accel {
    /// Hardware virtualisation through `/dev/kvm`.
    Kvm,
    /// QEMU's software emulator.
    Tcg,
}

impl Accel {
    /// Its name on QEMU's command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// A host directory shared with the guest over virtio-9p.
#[derive(Debug, Clone)]
pub(super) struct Share {
    pub tag: String,
    pub path: PathBuf,
    pub read_only: bool,
}

/// Everything on one QEMU command line.
#[derive(Debug)]
pub(super) struct Machine<'a> {
    /// What is booted (not given to a restore, which boots nothing).
    pub kernel: &'a Path,
    pub initramfs: &'a Path,
    /// Image disk (attached read-only); None for the acceleration probe.
    pub root_disk: Option<&'a Path>,
    /// Writable disk.
    pub data_disk: Option<&'a Path>,
    pub accel: Accel,
    pub cpus: u32,
    pub memory_mb: u64,
    /// With a network card, whose frames go through `net_fd`.
    pub network: bool,
    pub shares: &'a [Share],
    /// Connected stream socket (inherited) carrying the network card's
    /// frames to the sandbox's stack (filled in with the other channels).
    pub net_fd: Option<RawFd>,
    /// Connected socket (inherited) carrying the agent's port (None: no
    /// port, for bare boots).
    pub agent_fd: Option<RawFd>,
    /// Connected socket (inherited) for the QMP monitor.
    pub qmp_fd: Option<RawFd>,
    /// Start with the CPUs stopped (`-S`; a test hook for wedged guests).
    pub start_paused: bool,
    /// The host's TSC rate, handed to a TCG guest (see [`host_tsc_khz`]).
    pub tsc_khz: Option<u64>,
    /// Guest RAM in a file instead of anonymous memory (None: anonymous).
    pub memory_file: Option<MemoryFile<'a>>,
    /// Wait for a saved state (`-incoming defer`; QMP `migrate-incoming`
    /// then brings it in) instead of booting.
    pub incoming: bool,
    /// Boot the agent as a template instead of a sandbox's guest (see
    /// `template.rs`).
    pub template: Option<TemplateBoot>,
    /// A layer boot (see "Layer boots" in [`burrow_protocol::vm`]): the
    /// agent only streams the data disk's upper layer, and the guest's
    /// writes to the disk go to a throwaway overlay (`snapshot=on`).
    pub layer: bool,
}

/// How far a template guest boots before it is saved (see "Templates" in
/// [`burrow_protocol::vm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateBoot {
    /// The image mounted (`--vm-template`): for any start.
    Image,
    /// Also a fresh data disk as the sandbox's root
    /// (`--vm-template-root`): for first starts, whose data disk is a copy
    /// of the template's.
    Root,
}

/// Guest RAM backed by a file (`memory-backend-file`), exactly
/// `memory_mb` long.
///
/// Shared (`share=on`): the guest writes through to the file, so a state
/// saved with the `x-ignore-shared` capability leaves RAM out (the file is
/// the RAM). Private (`share=off`): the file is mapped copy-on-write, so
/// any number of guests restore from one file, each paying only for the
/// pages it changes.
#[derive(Debug, Clone, Copy)]
pub struct MemoryFile<'a> {
    /// The file (created or resized by QEMU to `memory_mb`).
    pub path: &'a Path,
    /// Writes reach the file (the guest that makes it) or stay private.
    pub shared: bool,
}

impl Machine<'_> {
    /// The kernel command line.
    pub(super) fn kernel_cmdline(&self) -> String {
        // reboot=t: a reset is a triple fault, which ends QEMU (-no-reboot)
        // without ACPI or a keyboard controller. panic=-1: a panic resets
        // at once. `--vm` (no dot, no '='), unknown to the kernel, is handed
        // to init as an argument. No `--` separator: QEMU's microvm appends
        // its `virtio_mmio.device=` words after ours, and after a `--`
        // they would go to init instead of the kernel.
        let mut words = vec![
            "console=ttyS0",
            "reboot=t",
            "panic=-1",
            "quiet",
            "loglevel=4",
            "8250.nr_uarts=1",
            "random.trust_cpu=on",
        ];
        // Under TCG the emulated CPU does not advertise an invariant TSC, so
        // the kernel would calibrate (slowly, sometimes failing) and then
        // distrust it, falling back to a 10 ms jiffies clock that also keeps
        // an idle guest ticking (4-5% of a host core instead of 0.1%). The
        // guest's TSC runs at the host's rate: tell it so.
        let tsc;
        if let Some(khz) = self.tsc_khz.filter(|_| self.accel == Accel::Tcg) {
            tsc = format!(
                "tsc_early_khz={khz} tsc=reliable lpj={} no_timer_check",
                khz * 1000 / GUEST_HZ
            );
            words.push(&tsc);
        }
        let ip;
        if self.network {
            ip = format!("ip={GUEST_IP}::{GATEWAY}:255.255.255.0::eth0:off");
            words.push(&ip);
        }
        words.push(match self.template {
            None if self.layer => burrow_protocol::vm::VM_LAYER_ARG,
            None => burrow_protocol::vm::VM_MODE_ARG,
            Some(TemplateBoot::Image) => burrow_protocol::vm::VM_TEMPLATE_ARG,
            Some(TemplateBoot::Root) => burrow_protocol::vm::VM_TEMPLATE_ROOT_ARG,
        });
        words.join(" ")
    }

    /// QEMU's arguments (without the binary).
    pub(super) fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
        let machine = match self.memory_file {
            Some(_) => "microvm,acpi=off,x-option-roms=off,isa-serial=on,memory-backend=ram",
            None => "microvm,acpi=off,x-option-roms=off,isa-serial=on",
        };
        push(&[
            "-M",
            machine,
            "-nodefaults",
            "-no-user-config",
            "-no-reboot",
            "-nographic",
            // QEMU's own seccomp filter, from before the guest runs: no
            // obsolete syscalls, no change of ids, no new process, no
            // scheduling or priority changes. QEMU then writes a saved
            // state through a descriptor it is handed (see `qmp`).
            "-sandbox",
            SANDBOX,
        ]);
        match self.accel {
            Accel::Kvm => push(&["-accel", "kvm", "-cpu", "host"]),
            // Without ERMS/FSRM the guest's kernel and libc do not pick
            // `rep movsb/stosb` copies, which TCG runs a byte per step
            // (memset ~10x, page faults ~3x faster without them).
            Accel::Tcg if self.cpus > 1 => {
                push(&["-accel", "tcg,thread=multi", "-cpu", "max,-erms,-fsrm"])
            }
            Accel::Tcg => push(&["-accel", "tcg", "-cpu", "max,-erms,-fsrm"]),
        }
        let (mem, smp) = (self.memory_mb.to_string(), self.cpus.to_string());
        push(&["-m", &mem, "-smp", &smp]);
        if let Some(file) = self.memory_file {
            let mut object = OsString::from(format!(
                "memory-backend-file,id=ram,size={}M,share={},mem-path=",
                self.memory_mb,
                if file.shared { "on" } else { "off" }
            ));
            object.push(escape_option(file.path));
            a.extend(["-object".into(), object]);
        }
        let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
        push(&[
            "-chardev",
            "stdio,id=console,signal=off",
            "-serial",
            "chardev:console",
        ]);
        push(&["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"]);
        // A restore has nothing to boot: the guest is in the saved RAM.
        // QEMU would read (and keep) the kernel and initramfs for nothing.
        if !self.incoming {
            let cmdline = self.kernel_cmdline();
            a.extend([
                "-kernel".into(),
                self.kernel.into(),
                "-initrd".into(),
                self.initramfs.into(),
                "-append".into(),
                cmdline.into(),
            ]);
        }
        for (id, disk, serial, ro) in [
            ("root", self.root_disk, ROOT_SERIAL, true),
            ("data", self.data_disk, DATA_SERIAL, false),
        ] {
            let Some(disk) = disk else { continue };
            let mut drive = OsString::from(format!("id={id},format=raw,if=none,cache=writeback,"));
            if ro {
                drive.push("readonly=on,");
            } else if self.layer {
                drive.push("snapshot=on,");
            }
            drive.push("file=");
            drive.push(escape_option(disk));
            a.extend(["-drive".into(), drive]);
            a.extend([
                "-device".into(),
                format!("virtio-blk-device,drive={id},serial={serial}").into(),
            ]);
        }
        let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
        if let Some(fd) = self.agent_fd {
            push(&[
                "-device",
                "virtio-serial-device,max_ports=2",
                "-chardev",
                &format!("socket,id=agent,fd={fd}"),
                "-device",
                &format!("virtserialport,chardev=agent,name={AGENT_PORT}"),
            ]);
        }
        if let Some(fd) = self.qmp_fd {
            push(&[
                "-chardev",
                &format!("socket,id=qmp,fd={fd}"),
                "-mon",
                "chardev=qmp,mode=control",
            ]);
        }
        if let Some(fd) = self.net_fd.filter(|_| self.network) {
            // Frames as 4-byte length-prefixed records on the socket, to
            // the stack that enforces the sandbox's policy; the card tells
            // the guest the link's MTU.
            push(&[
                "-netdev",
                &format!("socket,id=net0,fd={fd}"),
                "-device",
                &format!(
                    "virtio-net-device,netdev=net0,host_mtu={}",
                    burrow_net::addrs::MTU
                ),
            ]);
        }
        // As root, the guest's owners are the host's (passthrough). An
        // unprivileged QEMU cannot give files away: with `none` the guest's
        // chown is ignored and its files are the user's on the host.
        // SAFETY: geteuid has no preconditions.
        let model = if unsafe { libc::geteuid() } == 0 {
            "passthrough"
        } else {
            "none"
        };
        for (i, share) in self.shares.iter().enumerate() {
            let mut fsdev = OsString::from(format!(
                "local,id=fs{i},security_model={model},{}path=",
                if share.read_only { "readonly=on," } else { "" }
            ));
            fsdev.push(escape_option(&share.path));
            a.extend(["-fsdev".into(), fsdev]);
            a.extend([
                "-device".into(),
                format!("virtio-9p-device,fsdev=fs{i},mount_tag={}", share.tag).into(),
            ]);
        }
        if self.start_paused {
            a.push("-S".into());
        }
        if self.incoming {
            a.extend(["-incoming".into(), "defer".into()]);
        }
        a
    }
}

/// The guest kernel's tick rate (CONFIG_HZ in vm/kernel/burrow.config).
const GUEST_HZ: u64 = 100;

/// The host's TSC rate in kHz: measured against the monotonic clock once
/// per host boot (50 ms; well within the 0.1% the guest needs) and cached
/// next to the acceleration verdict, so starts do not pay for it.
pub fn host_tsc_khz() -> Option<u64> {
    static KHZ: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *KHZ.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let cache = super::accel::cache_dir().join("host-tsc");
        if let Some((b, khz)) = std::fs::read_to_string(&cache).ok().and_then(|t| {
            t.split_once(' ')
                .map(|(b, k)| (b.to_owned(), k.trim().parse().ok()))
        }) {
            if b == boot.trim() {
                return khz;
            }
        }
        let khz = measure_tsc_khz();
        if let Some(k) = khz {
            super::accel::write_cache(&cache, format!("{} {k}", boot.trim()).as_bytes());
        }
        khz
    })
}

fn measure_tsc_khz() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        let t0 = std::time::Instant::now();
        // SAFETY: rdtsc has no preconditions on x86_64.
        let c0 = unsafe { core::arch::x86_64::_rdtsc() };
        std::thread::sleep(std::time::Duration::from_millis(50));
        // SAFETY: as above.
        let c1 = unsafe { core::arch::x86_64::_rdtsc() };
        let us = t0.elapsed().as_micros() as u64;
        let khz = c1.checked_sub(c0)?.checked_mul(1000)? / us.max(1);
        // Round to 1 MHz: measurement noise, not a real difference.
        let khz = (khz + 500) / 1000 * 1000;
        (khz >= 100_000).then_some(khz)
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// The QEMU arguments of a bare boot of `kernel` with `initramfs` and no
/// devices: the machine the driver uses, as the floor for benchmarks.
pub fn bare_boot_args(
    kernel: &Path,
    initramfs: &Path,
    accel: Accel,
    memory_mb: u64,
) -> Vec<OsString> {
    Machine {
        kernel,
        initramfs,
        root_disk: None,
        data_disk: None,
        accel,
        cpus: 1,
        memory_mb,
        network: false,
        shares: &[],
        agent_fd: None,
        net_fd: None,
        qmp_fd: None,
        start_paused: false,
        tsc_khz: host_tsc_khz(),
        memory_file: None,
        incoming: false,
        template: None,
        layer: false,
    }
    .args()
}

/// A path inside a QEMU option string: commas are doubled.
fn escape_option(path: &Path) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut out = Vec::new();
    for &b in path.as_os_str().as_bytes() {
        out.push(b);
        if b == b',' {
            out.push(b',');
        }
    }
    OsString::from_vec(out)
}

/// The QEMU binary: `$BURROW_QEMU`, else `qemu-system-x86_64` on PATH.
pub fn locate_qemu() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("BURROW_QEMU").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(unavailable(format!(
                "BURROW_QEMU={} does not exist",
                p.display()
            )))
        };
    }
    crate::engine::driver::container::find_on_path("qemu-system-x86_64").ok_or_else(|| {
        unavailable(
            "qemu-system-x86_64 was not found (install the qemu-system-x86 package, or set BURROW_QEMU)"
                .into(),
        )
    })
}

/// The guest kernel (an ELF `vmlinux` with a PVH entry): `$BURROW_VM_KERNEL`,
/// else `burrow-vmlinux` next to the `burrow` binary, else `kernel/vmlinux`
/// in the cargo target directory the binary was built in (where
/// `scripts/build-kernel.sh` puts it), else `/usr/lib/burrow/vmlinux`.
pub fn locate_kernel() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("BURROW_VM_KERNEL").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(unavailable(format!(
                "BURROW_VM_KERNEL={} does not exist",
                p.display()
            )))
        };
    }
    let mut cands = Vec::new();
    if let Some(dir) =
        crate::engine::procs::burrow_bin().and_then(|b| b.parent().map(Path::to_path_buf))
    {
        cands.push(dir.join("burrow-vmlinux"));
        // target/<profile>/burrow -> target/kernel/vmlinux
        if let Some(target) = dir.parent() {
            cands.push(target.join("kernel/vmlinux"));
            // target/<profile>/deps/... test binaries resolve `burrow` one up.
            if let Some(up) = target.parent() {
                cands.push(up.join("kernel/vmlinux"));
            }
        }
    }
    cands.push(PathBuf::from("/usr/lib/burrow/vmlinux"));
    cands.into_iter().find(|c| c.is_file()).ok_or_else(|| {
        unavailable(
            "the guest kernel was not found (build it with scripts/build-kernel.sh, or set BURROW_VM_KERNEL)"
                .into(),
        )
    })
}

pub(super) fn unavailable(reason: String) -> Error {
    Error::Runtime {
        runtime: "vm".into(),
        reason,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn machine<'a>(shares: &'a [Share]) -> Machine<'a> {
        Machine {
            kernel: Path::new("/k/vmlinux"),
            initramfs: Path::new("/r/init.cpio"),
            root_disk: Some(Path::new("/images/a,b.ext4")),
            data_disk: Some(Path::new("/sb/data.ext4")),
            accel: Accel::Tcg,
            cpus: 2,
            memory_mb: 384,
            network: true,
            shares,
            agent_fd: Some(7),
            net_fd: Some(9),
            qmp_fd: Some(8),
            start_paused: false,
            tsc_khz: Some(2_500_000),
            memory_file: None,
            incoming: false,
            template: None,
            layer: false,
        }
    }

    fn joined(m: &Machine<'_>) -> Vec<String> {
        m.args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn command_line_has_every_device() {
        let shares = [Share {
            tag: "vol0".into(),
            path: "/data/v".into(),
            read_only: true,
        }];
        let m = machine(&shares);
        let a = joined(&m);
        let has = |s: &str| a.iter().any(|x| x == s);
        assert!(has("-no-reboot"));
        assert!(has("tcg,thread=multi"));
        assert!(has("384") && has("2"));
        assert!(has(
            "id=root,format=raw,if=none,cache=writeback,readonly=on,file=/images/a,,b.ext4"
        ));
        assert!(has("virtio-blk-device,drive=root,serial=burrow-root"));
        assert!(has(
            "id=data,format=raw,if=none,cache=writeback,file=/sb/data.ext4"
        ));
        assert!(has("socket,id=agent,fd=7"));
        assert!(has("socket,id=qmp,fd=8"));
        assert!(has("virtserialport,chardev=agent,name=burrow.agent"));
        assert!(has("socket,id=net0,fd=9"));
        assert!(has("virtio-net-device,netdev=net0,host_mtu=65520"));
        assert!(has(
            "local,id=fs0,security_model=passthrough,readonly=on,path=/data/v"
        ));
        assert!(has("virtio-9p-device,fsdev=fs0,mount_tag=vol0"));
        assert!(!has("-S"));
        assert!(!has("-incoming"));
        assert!(!a.iter().any(|x| x.contains("memory-backend")));
        let cmdline = m.kernel_cmdline();
        assert!(cmdline.ends_with(" --vm"), "{cmdline}");
        assert!(!cmdline.contains(" -- "), "{cmdline}");
        assert!(cmdline.contains("ip=10.0.2.15::10.0.2.2:255.255.255.0::eth0:off"));
        assert!(cmdline.contains("tsc_early_khz=2500000 tsc=reliable lpj=25000000"));
        assert!(has("max,-erms,-fsrm"));
    }

    #[test]
    fn ram_in_a_file_and_an_incoming_state() {
        let mut m = machine(&[]);
        m.memory_file = Some(MemoryFile {
            path: Path::new("/t/ram,1"),
            shared: true,
        });
        let a = joined(&m);
        assert!(a
            .iter()
            .any(|x| x == "microvm,acpi=off,x-option-roms=off,isa-serial=on,memory-backend=ram"));
        assert!(a
            .iter()
            .any(|x| x == "memory-backend-file,id=ram,size=384M,share=on,mem-path=/t/ram,,1"));
        assert!(!a.iter().any(|x| x == "-incoming"));
        m.memory_file = Some(MemoryFile {
            path: Path::new("/t/ram"),
            shared: false,
        });
        m.incoming = true;
        let a = joined(&m);
        assert!(a
            .iter()
            .any(|x| x == "memory-backend-file,id=ram,size=384M,share=off,mem-path=/t/ram"));
        let i = a.iter().position(|x| x == "-incoming").unwrap();
        assert_eq!(a[i + 1], "defer");
        for boot in ["-kernel", "-initrd", "-append"] {
            assert!(!a.iter().any(|x| x == boot), "{boot} in a restore");
        }
        assert!(m.kernel_cmdline().ends_with(" --vm"));
        m.template = Some(TemplateBoot::Image);
        let cmdline = m.kernel_cmdline();
        assert!(cmdline.ends_with(" --vm-template"), "{cmdline}");
        assert!(!cmdline.contains(" --vm "), "{cmdline}");
        m.template = Some(TemplateBoot::Root);
        assert!(m.kernel_cmdline().ends_with(" --vm-template-root"));
    }

    #[test]
    fn a_layer_boot_has_the_data_disk_alone_behind_a_throwaway_overlay() {
        let mut m = machine(&[]);
        m.root_disk = None;
        m.layer = true;
        let a = joined(&m);
        assert!(a
            .iter()
            .any(|x| x
                == "id=data,format=raw,if=none,cache=writeback,snapshot=on,file=/sb/data.ext4"));
        assert!(!a.iter().any(|x| x.starts_with("id=root")));
        assert!(m.kernel_cmdline().ends_with(" --vm-layer"));
    }

    #[test]
    fn probe_machine_has_no_disks_and_no_network() {
        let mut m = machine(&[]);
        m.root_disk = None;
        m.data_disk = None;
        m.network = false;
        m.qmp_fd = None;
        m.agent_fd = None;
        m.cpus = 1;
        m.start_paused = true;
        let a = joined(&m);
        assert!(!a
            .iter()
            .any(|x| x.contains("virtio-blk") || x.contains("netdev")));
        assert!(!a
            .iter()
            .any(|x| x.contains("qmp") || x.contains("virtserialport")));
        assert!(a.iter().any(|x| x == "tcg"));
        assert!(a.iter().any(|x| x == "-S"));
        assert!(!m.kernel_cmdline().contains("ip="));
        // KVM guests get kvmclock; the TSC hints are for TCG only.
        m.accel = Accel::Kvm;
        assert!(!m.kernel_cmdline().contains("tsc_early_khz"));
    }
}
