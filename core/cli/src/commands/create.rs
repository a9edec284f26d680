//! `burrow create`: define a sandbox without starting it. Also owns the
//! configuration flags shared with `burrow run` and `burrow up`, and how
//! `create` and `run` name and define a sandbox (`[--name N] IMAGE`, a
//! generated name when none is given).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use burrow::{
    Backend, DriverKind, Error, ErrorCode, Mount, MountSource, OciRuntime, Sandbox, SandboxConfig,
    SandboxHandle,
};
use clap::builder::PossibleValuesParser;
use clap::Args;

use super::common::{generated_name, parse_mib, parse_pairs};
use super::{Ctx, Usage};

/// Configuration flags of a new sandbox (the image is the command's own:
/// positional for `create` and `run`, `--image` for `up`).
#[derive(Debug, Args)]
pub(crate) struct SandboxOpts {
    /// CPU limit in cores (fractions allowed).
    #[arg(long, value_name = "N")]
    pub cpus: Option<f64>,
    /// Memory limit: MiB (1024), or with a unit (512M, 4G).
    #[arg(long, value_name = "SIZE", value_parser = parse_mib)]
    pub memory: Option<u64>,
    /// Maximum number of processes.
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// Disk limit of the sandbox's writable layer: MiB (8192), or with a
    /// unit (64M, 8G). Past it the guest gets ENOSPC. Set at create.
    #[arg(long, value_name = "SIZE", value_parser = parse_mib)]
    pub disk: Option<u64>,
    /// Run even where --cpus, --memory, --pids or --disk cannot be
    /// enforced (as an unprivileged user without a delegated cgroup): such
    /// a limit is left out with a note instead of refusing the sandbox.
    #[arg(long)]
    pub best_effort_limits: bool,
    /// Leave out the host's default limits: what --cpus, --memory, --pids
    /// and --disk do not set stays unlimited (default: a container sandbox
    /// gets $BURROW_DEFAULT_MEMORY, $BURROW_DEFAULT_CPUS and
    /// $BURROW_DEFAULT_PIDS, else 2G, 2 CPUs and 4096 processes, and every
    /// sandbox $BURROW_DEFAULT_DISK, else 8G, where the host can enforce
    /// them).
    /// Refused by a server to every tenant but the default one.
    #[arg(long)]
    pub no_default_limits: bool,
    /// Allow a syscall that burrow's seccomp profile denies, by its x86-64
    /// name (repeatable; io_uring_setup). The container driver's filter
    /// then admits it; a microVM has no such filter. Refused by a server to
    /// every tenant but the default one.
    #[arg(long = "allow-syscall", value_name = "NAME")]
    pub allow_syscalls: Vec<String>,
    /// Environment variable of every process (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Default working directory (absolute guest path).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// Label (repeatable).
    #[arg(short = 'l', long = "label", value_name = "K=V")]
    pub labels: Vec<String>,
    /// Mount HOST:GUEST[:ro] (repeatable). A HOST without '/' is a named
    /// volume, kept when the sandbox is removed.
    #[arg(short = 'v', long = "volume", value_name = "HOST:GUEST[:ro]")]
    pub volumes: Vec<String>,
    /// Outbound network access to anything public (private ranges and
    /// the host stay unreachable unless an --allow rule names them).
    #[arg(long, conflicts_with = "allow")]
    pub network: bool,
    /// Network access only to what RULE allows (repeatable): a domain
    /// (pypi.org), its subdomains (*.github.com), an IP or CIDR, with an
    /// optional protocol and ports (tcp:10.0.0.5:5432, udp:*:53, host:80-90).
    #[arg(long, value_name = "RULE")]
    pub allow: Vec<String>,
    /// Refuse what RULE matches even where an allow rule matches
    /// (repeatable; alone, it refuses that from anything public).
    #[arg(long, value_name = "RULE")]
    pub deny: Vec<String>,
    /// Publish a port while the sandbox runs (repeatable): connections to
    /// HOST_PORT on HOST_IP (default 127.0.0.1) reach GUEST_PORT on the
    /// sandbox's loopback; /udp for datagrams. No network is needed.
    #[arg(
        short = 'p',
        long = "publish",
        value_name = "[HOST_IP:]HOST_PORT:GUEST_PORT[/udp]"
    )]
    pub publish: Vec<String>,
    /// A secret the guest never holds (repeatable): its $NAME holds a
    /// placeholder, which the sandbox's network stack replaces with the
    /// value in the HEADERs of HTTP(S) requests to the HOSTs only
    /// (api.github.com, *.example.com, an IPv4 address). HEADERs, after a
    /// ':', default to Authorization and Proxy-Authorization
    /// (KEY@api.example.com:X-Api-Key=env:KEY). The value comes from
    /// env:VAR (this process's environment) or file:PATH (its content,
    /// without a final newline), never from the command line. Needs
    /// --network or --allow.
    #[arg(
        long = "secret",
        value_name = "NAME@HOST[,HOST...][:HEADER[,HEADER...]]=env:VAR|file:PATH"
    )]
    pub secrets: Vec<String>,
    /// Isolation driver: container (namespaces under an OCI runtime) or vm
    /// (a QEMU microVM). Default: the backend's ($BURROW_DRIVER where the
    /// sandbox runs: here, or on the server with BURROW_URL), else container.
    #[arg(long, value_name = "DRIVER", value_parser = PossibleValuesParser::new(["container", "vm"]))]
    pub driver: Option<String>,
    /// OCI runtime of the container driver.
    #[arg(long, value_name = "RUNTIME", value_parser = PossibleValuesParser::new(["runc", "crun", "runsc"]))]
    pub runtime: Option<String>,
    /// Reclaim the sandbox after it has been idle this long (500ms, 30s,
    /// 1.5m, 1h30m, 2d or seconds; 0 disables reclaim explicitly).
    #[arg(long, value_name = "DUR", value_parser = burrow::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// What idle reclaim does: stop (default), or hibernate (a vm sandbox
    /// is saved whole, processes and memory, and the next start resumes
    /// it; where it cannot be saved it is stopped).
    #[arg(long, value_name = "ACTION", value_parser = PossibleValuesParser::new(["stop", "hibernate"]))]
    pub idle_action: Option<String>,
    /// Stop each run after this long.
    #[arg(long, value_name = "DUR", value_parser = burrow::parse_duration)]
    pub max_duration: Option<Duration>,
    /// Bound on each start (default 60s).
    #[arg(long, value_name = "DUR", value_parser = burrow::parse_duration)]
    pub startup_timeout: Option<Duration>,
    /// Start the sandbox again on the next exec/shell/cp after it was
    /// reclaimed for idleness (the default when an idle timeout is set).
    #[arg(long, overrides_with = "no_demand_start")]
    pub demand_start: bool,
    /// Never start it again on demand: a reclaimed sandbox stays stopped
    /// until started explicitly.
    #[arg(long, overrides_with = "demand_start")]
    pub no_demand_start: bool,
}

impl SandboxOpts {
    /// The configuration these flags describe with `image` (validated by
    /// the library).
    pub fn to_config(&self, image: &str) -> burrow::Result<SandboxConfig> {
        let mut c = SandboxConfig::new(image.to_owned());
        c.cpus = self.cpus;
        c.memory_mb = self.memory;
        c.pids_limit = self.pids;
        c.disk_mb = self.disk;
        c.best_effort_limits = self.best_effort_limits;
        c.seccomp_allow = self.allow_syscalls.clone();
        c.default_limits = !self.no_default_limits;
        c.env = parse_pairs("--env", &self.env)?;
        c.workdir = self.workdir.clone();
        c.labels = parse_pairs("--label", &self.labels)?;
        c.mounts = self
            .volumes
            .iter()
            .map(|v| parse_mount(v))
            .collect::<burrow::Result<_>>()?;
        c.network = network_setting(self.network, &self.allow, &self.deny)?;
        c.ports = self
            .publish
            .iter()
            .map(|p| p.parse::<burrow::PortMapping>())
            .collect::<Result<_, _>>()?;
        c.secrets = self
            .secrets
            .iter()
            .map(|s| parse_secret(s))
            .collect::<burrow::Result<_>>()?;
        // None: the backend's default (this host's $BURROW_DRIVER, or the
        // server's with BURROW_URL).
        c.driver = self
            .driver
            .as_deref()
            .map(str::parse::<DriverKind>)
            .transpose()?;
        if let Some(r) = &self.runtime {
            c.runtime = Some(r.parse::<OciRuntime>()?);
        }
        c.idle_timeout = self.idle_timeout;
        if let Some(a) = self.idle_action.as_deref() {
            c.idle_action = burrow::IdleAction::parse(a).unwrap_or_default();
        }
        c.max_duration = self.max_duration;
        if let Some(d) = self.startup_timeout {
            c.startup_timeout = d;
        }
        c.demand_start = match (self.demand_start, self.no_demand_start) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        Ok(c)
    }
}

/// `NAME@HOST[,HOST...][:HEADER[,HEADER...]]=env:VAR|file:PATH`: the
/// secret, its value read from this process's environment or a file. The
/// core checks the name, hosts and headers. An error never quotes the
/// value.
fn parse_secret(spec: &str) -> burrow::Result<burrow::Secret> {
    let bad = |reason: String| Error::InvalidArgument {
        argument: "--secret".into(),
        reason,
    };
    let (target, source) = spec.split_once('=').ok_or_else(|| {
        bad("expected NAME@HOST[,HOST...][:HEADER[,HEADER...]]=env:VAR or =file:PATH".into())
    })?;
    let (name, hosts) = target.split_once('@').ok_or_else(|| {
        bad(format!(
            "{target:?} is not NAME@HOST[,HOST...]: the hosts the secret is for are required"
        ))
    })?;
    // Neither a host nor a header name has a ':', so the first one ends
    // the hosts. A header of digits alone is a port: hosts have none.
    let (hosts, headers) = match hosts.split_once(':') {
        None => (hosts, Vec::new()),
        Some((_, "")) => {
            return Err(bad(format!(
                "{target:?} names no header after ':' (leave the ':' out for Authorization and Proxy-Authorization)"
            )))
        }
        Some((hosts, headers)) => {
            let headers: Vec<&str> = headers.split(',').collect();
            if let Some(port) = headers
                .iter()
                .find(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(bad(format!(
                    "{target:?}: a secret's hosts take no port ({port}); after ':' come the headers it goes in"
                )));
            }
            (hosts, headers)
        }
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    let value = if let Some(var) = source.strip_prefix("env:") {
        std::env::var(var).map_err(|_| {
            bad(format!(
                "the environment variable {var:?} is not set (or not UTF-8)"
            ))
        })?
    } else if let Some(path) = source.strip_prefix("file:") {
        let mut v = std::fs::read_to_string(path).map_err(|e| Error::Io {
            context: "reading the secret's value".into(),
            path: Some(PathBuf::from(path)),
            source: e,
        })?;
        if v.ends_with('\n') {
            v.pop();
            if v.ends_with('\r') {
                v.pop();
            }
        }
        v
    } else {
        return Err(bad(format!(
            "the value of {name} comes from env:VAR or file:PATH, never from the command line"
        )));
    };
    Ok(burrow::Secret::new(name, value, hosts).in_headers(headers))
}

/// `HOST:GUEST[:ro|:rw]`; a HOST without '/' is a named volume, a relative
/// host path is taken from the current directory.
fn parse_mount(spec: &str) -> burrow::Result<Mount> {
    let bad = || Error::InvalidArgument {
        argument: "--volume".into(),
        reason: format!("{spec:?} is not HOST:GUEST[:ro]"),
    };
    let (rest, read_only) = match spec.rsplit_once(':') {
        Some((rest, "ro")) => (rest, true),
        Some((rest, "rw")) => (rest, false),
        _ => (spec, false),
    };
    let (host, target) = rest.split_once(':').ok_or_else(bad)?;
    if host.is_empty() || target.is_empty() {
        return Err(bad());
    }
    let source = if host.contains('/') {
        let path = std::path::absolute(Path::new(host)).map_err(|e| Error::Io {
            context: "resolving the mount source".into(),
            path: Some(PathBuf::from(host)),
            source: e,
        })?;
        MountSource::Host(path)
    } else {
        MountSource::Volume(host.to_owned())
    };
    Ok(Mount::new(source, target).read_only(read_only))
}

/// The name and image of `create` and `run`: `[--name N] IMAGE`, docker
/// style (`--image IMG` is accepted for the image too).
#[derive(Debug, Args)]
pub(crate) struct NameImage {
    /// Sandbox name (1..=128 bytes). Default: a generated one
    /// (adjective-animal-NNNN), printed on the way.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Image: a rootfs directory, an OCI layout (oci:DIR[:TAG]) or an
    /// imported name.
    #[arg(value_name = "IMAGE")]
    pub image: Option<String>,
    /// The image, as a flag (the same as IMAGE).
    #[arg(long = "image", value_name = "IMG")]
    pub image_flag: Option<String>,
}

impl NameImage {
    /// The image given, once. `burrow VERB NAME --image IMG` (the name
    /// first: the old form) is refused rather than read one way or the
    /// other.
    pub fn image(&self, verb: &str) -> Result<&str, Usage> {
        match (&self.image, &self.image_flag) {
            (Some(image), None) | (None, Some(image)) => Ok(image),
            (None, None) => Err(Usage(format!(
                "an image is required: burrow {verb} [--name NAME] IMAGE"
            ))),
            (Some(positional), Some(flag)) => Err(Usage(format!(
                "two images given ({positional:?} and --image {flag:?}); the \
                 positional argument is the image and the name is --name: \
                 burrow {verb} --name {positional} {flag}"
            ))),
        }
    }

    /// Defines the sandbox: under `--name`, or else under a generated name,
    /// another one while it is taken.
    pub async fn define(
        &self,
        ctx: Ctx,
        config: SandboxConfig,
        detached: bool,
        backend: Arc<dyn Backend>,
    ) -> anyhow::Result<SandboxHandle> {
        let define = |name: String| {
            Sandbox::builder(name)
                .config(config.clone())
                .detached(detached)
                .backend(backend.clone())
                .define()
        };
        let Some(name) = &self.name else {
            let handle = define_unique(generated_name, define).await?;
            ctx.progress(format_args!("sandbox name: {}", handle.name()));
            return Ok(handle);
        };
        Ok(define(name.clone()).await?)
    }
}

/// `define` under the first name of `names` that is not taken (a few tries:
/// with 32 * 32 * 9000 generated names, many taken in a row is no chance).
async fn define_unique<F>(
    mut names: impl FnMut() -> String,
    define: impl Fn(String) -> F,
) -> burrow::Result<SandboxHandle>
where
    F: std::future::Future<Output = burrow::Result<SandboxHandle>>,
{
    let mut attempts = 16;
    loop {
        match define(names()).await {
            Err(e) if e.code() == ErrorCode::AlreadyExists && attempts > 1 => attempts -= 1,
            other => return other,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    #[command(flatten)]
    target: NameImage,
    #[command(flatten)]
    opts: SandboxOpts,
    /// Keep it running after the process that starts it exits (the CLI
    /// always starts sandboxes detached).
    #[arg(long)]
    detached: bool,
}

pub(crate) async fn create(ctx: Ctx, args: CreateArgs) -> anyhow::Result<u8> {
    let config = args.opts.to_config(args.target.image("create")?)?;
    let backend: Arc<dyn Backend> = ctx.backend().await?;
    let handle = args
        .target
        .define(ctx, config, args.detached, backend)
        .await?;
    let info = handle.info().await?;
    ctx.print(&info, &info.id)?;
    Ok(0)
}

/// The network of `--network`, `--allow` and `--deny`.
pub(crate) fn network_setting(
    all: bool,
    allow: &[String],
    deny: &[String],
) -> burrow::Result<burrow::Network> {
    if allow.is_empty() && deny.is_empty() {
        return Ok(all.into());
    }
    let policy = if allow.is_empty() {
        burrow::NetworkPolicy::allow(["*"])
    } else {
        burrow::NetworkPolicy::allow(allow)
    };
    Ok(burrow::Network::Policy(
        policy.and_then(|p| p.and_deny(deny))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A generated name that is taken is replaced by the next one.
    #[tokio::test]
    async fn a_taken_generated_name_is_retried() {
        let home = tempfile::Builder::new()
            .prefix("bu")
            .tempdir_in("/tmp")
            .expect("temp home");
        let backend: Arc<dyn Backend> = Arc::new(
            burrow::LocalBackend::open_at(home.path())
                .await
                .expect("backend"),
        );
        let define = |name: String| {
            Sandbox::builder(name)
                .image(home.path().to_string_lossy().into_owned())
                .backend(backend.clone())
                .define()
        };
        define("brave-otter-1234".into()).await.expect("first");
        let mut names = ["brave-otter-1234", "brave-otter-1234", "calm-mole-4321"]
            .into_iter()
            .map(String::from);
        let handle = define_unique(|| names.next().unwrap_or_default(), define)
            .await
            .expect("defined under the free name");
        assert_eq!(handle.name(), "calm-mole-4321");
        // A name that is always taken ends with the typed error.
        let e = define_unique(|| "brave-otter-1234".into(), define)
            .await
            .err()
            .map(|e| e.code());
        assert_eq!(e, Some(ErrorCode::AlreadyExists));
    }
}
