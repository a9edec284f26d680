//! Building sandboxes: `Sandbox::builder("worker").image(..).create()`.

use std::path::PathBuf;
use std::sync::Arc;

use super::modify::{invalid_duration, not_a_duration};
use super::{Sandbox, SandboxHandle};
use crate::backend::{Backend, CreateRequest, StartOptions};
use crate::duration::IntoDuration;
use crate::error::{Error, Result};
use crate::model::{
    DriverKind, IdleAction, Mount, MountSource, Network, OciRuntime, SandboxConfig,
};
use crate::select::default_backend;

/// Collects options for a new sandbox. Options apply only when the sandbox is
/// created; an existing sandbox's configuration always wins.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until create(), connect_or_create() or replace() is called"]
pub struct SandboxBuilder {
    name: String,
    config: SandboxConfig,
    /// The driver asked for (None: the default of the backend that creates
    /// the sandbox).
    driver: Option<String>,
    detached: bool,
    backend: Option<Arc<dyn Backend>>,
    /// The first option given a value that is not one (a negative
    /// duration): the builder's calls fail with it.
    invalid: Option<String>,
}

/// A builder that replaces an existing sandbox of the same name. Only
/// [`ReplaceBuilder::create`] is offered: replacing is not combinable with
/// `connect_or_create`.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until create() is called"]
pub struct ReplaceBuilder {
    inner: SandboxBuilder,
}

impl SandboxBuilder {
    pub(super) fn new(name: impl Into<String>) -> Self {
        SandboxBuilder {
            name: name.into(),
            config: SandboxConfig::new(""),
            driver: None,
            detached: false,
            backend: None,
            invalid: None,
        }
    }

    /// What idle reclaim does: [`IdleAction::Stop`] (the default) or
    /// [`IdleAction::Hibernate`] (the vm driver saves the whole guest and
    /// the next start resumes it).
    pub fn idle_action(mut self, action: IdleAction) -> Self {
        self.config.idle_action = action;
        self
    }

    /// Image reference (rootfs directory, `oci:DIR[:TAG]`, or imported name).
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.config.image = image.into();
        self
    }
    /// CPU limit in cores (`2`, `0.5`).
    pub fn cpus(mut self, cpus: impl Into<f64>) -> Self {
        self.config.cpus = Some(cpus.into());
        self
    }
    /// Memory limit in MiB (`.memory(1024)` is 1 GiB).
    pub fn memory(mut self, mib: u64) -> Self {
        self.config.memory_mb = Some(mib);
        self
    }
    /// Memory limit in MiB (the same as [`Self::memory`]).
    pub fn memory_mb(mut self, mb: u64) -> Self {
        self.config.memory_mb = Some(mb);
        self
    }
    /// Process count limit.
    pub fn pids_limit(mut self, n: u64) -> Self {
        self.config.pids_limit = Some(n);
        self
    }
    /// Disk limit in MiB of the writable layer: past it the guest gets
    /// `ENOSPC`.
    pub fn disk_mb(mut self, mb: u64) -> Self {
        self.config.disk_mb = Some(mb);
        self
    }
    /// Run even where the CPU, memory or process limits asked for cannot
    /// be enforced (an unprivileged user without a delegated cgroup): each
    /// such limit is left out, with a note. Off by default: such a sandbox
    /// is refused with [`Error::InvalidConfig`](crate::Error::InvalidConfig)
    /// naming the limit.
    pub fn best_effort_limits(mut self, yes: bool) -> Self {
        self.config.best_effort_limits = yes;
        self
    }
    /// Whether the limits left out get the backend's defaults (on by
    /// default); see [`SandboxConfig::default_limits`].
    pub fn default_limits(mut self, yes: bool) -> Self {
        self.config.default_limits = yes;
        self
    }
    /// Allows a syscall that burrow's seccomp profile denies, by its x86-64
    /// name (`io_uring_setup`); see [`SandboxConfig::seccomp_allow`].
    pub fn allow_syscall(mut self, name: impl Into<String>) -> Self {
        self.config.seccomp_allow.push(name.into());
        self
    }
    /// An environment variable for every process.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.env.insert(key.into(), value.into());
        self
    }
    /// Default working directory.
    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.config.workdir = Some(dir.into());
        self
    }
    /// A label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.labels.insert(key.into(), value.into());
        self
    }
    /// Mounts a host directory at `target`.
    pub fn mount(
        mut self,
        host: impl Into<PathBuf>,
        target: impl Into<String>,
        read_only: bool,
    ) -> Self {
        self.config.mounts.push(Mount {
            source: MountSource::Host(host.into()),
            target: target.into(),
            read_only,
        });
        self
    }
    /// Mounts the named volume `volume` at `target` (created on first use,
    /// kept when the sandbox is removed).
    pub fn volume(mut self, volume: impl Into<String>, target: impl Into<String>) -> Self {
        self.config.mounts.push(Mount {
            source: MountSource::Volume(volume.into()),
            target: target.into(),
            read_only: false,
        });
        self
    }
    /// The main process: started with every run once the sandbox is
    /// Running; when it ends, the run ends (reason `completed`). Its output
    /// is in the sandbox's logs.
    pub fn command<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.command = Some(argv.into_iter().map(Into::into).collect());
        self
    }
    /// The image's Entrypoint then Cmd as the main process (see
    /// [`Self::command`]).
    pub fn image_command(mut self) -> Self {
        self.config.command = Some(Vec::new());
        self
    }
    /// Outbound network access: `true` (anything public), `false` (none,
    /// the default), [`Network::All`], [`Network::None`], or a
    /// [`NetworkPolicy`] of allow and deny rules
    /// (`NetworkPolicy::allow(["pypi.org", "*.pythonhosted.org"])`).
    ///
    /// [`NetworkPolicy`]: crate::NetworkPolicy
    pub fn network(mut self, network: impl Into<Network>) -> Self {
        self.config.network = network.into();
        self
    }
    /// Publishes a port while the sandbox runs: host `8080` on 127.0.0.1
    /// to the sandbox's `80` is `.port(PortMapping::tcp(8080, 80))`; the
    /// text form is [`PortMapping`]'s `FromStr`
    /// (`"0.0.0.0:5353:53/udp".parse()?`).
    pub fn port(mut self, mapping: crate::model::PortMapping) -> Self {
        self.config.ports.push(mapping);
        self
    }
    /// A secret the guest never holds: its variable `name` holds a
    /// placeholder, which the sandbox's network stack replaces with
    /// `value` in the `Authorization` and `Proxy-Authorization` headers of
    /// HTTP requests (HTTPS included) to `hosts` only (`api.github.com`,
    /// `*.example.com`, an IPv4 address); a placeholder in the request
    /// line or another header, or sent anywhere else, closes the
    /// connection. The sandbox needs a network.
    /// `.secret("GITHUB_TOKEN", token, ["api.github.com"])`; for other
    /// headers, a configuration's `secrets` with
    /// [`Secret::in_headers`](crate::model::Secret::in_headers).
    pub fn secret<I, S>(
        mut self,
        name: impl Into<String>,
        value: impl Into<crate::model::SecretValue>,
        hosts: I,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config
            .secrets
            .push(crate::model::Secret::new(name, value, hosts));
        self
    }
    /// Idle timeout (reclaim after this long without activity): a
    /// [`Duration`] or a number of seconds (`.idle_timeout(300)`).
    pub fn idle_timeout(mut self, d: impl IntoDuration) -> Self {
        self.config.idle_timeout = Some(invalid_duration(&mut self.invalid, "idle_timeout", d));
        self
    }
    /// Maximum duration of each run: a [`Duration`] or a number of seconds
    /// (`.max_duration(3600)`).
    pub fn max_duration(mut self, d: impl IntoDuration) -> Self {
        self.config.max_duration = Some(invalid_duration(&mut self.invalid, "max_duration", d));
        self
    }
    /// Bound on each start: a [`Duration`] or a number of seconds.
    pub fn startup_timeout(mut self, d: impl IntoDuration) -> Self {
        self.config.startup_timeout = invalid_duration(&mut self.invalid, "startup_timeout", d);
        self
    }
    /// OCI runtime of the container driver.
    pub fn runtime(mut self, runtime: OciRuntime) -> Self {
        self.config.runtime = Some(runtime);
        self
    }
    /// Isolation driver: `"container"` / [`DriverKind::Container`] or
    /// `"vm"` / [`DriverKind::Vm`]. Default: the backend's (for the local
    /// backend, `$BURROW_DRIVER` on its host, else container). An unknown
    /// name fails the create with `invalid_config`.
    pub fn driver(mut self, driver: impl AsRef<str>) -> Self {
        self.driver = Some(driver.as_ref().to_owned());
        self
    }
    /// Replaces the whole configuration (its driver included: `None` leaves
    /// the choice to the backend).
    pub fn config(mut self, config: SandboxConfig) -> Self {
        self.driver = config.driver.map(|d| d.as_str().to_owned());
        self.config = config;
        self
    }
    /// Survive the creating process (default: stop when it exits).
    pub fn detached(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }
    /// Uses `backend` instead of the default one ([`crate::default_backend`]).
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Replace an existing sandbox of this name (destroying it) on create.
    pub fn replace(self) -> ReplaceBuilder {
        ReplaceBuilder { inner: self }
    }

    async fn resolve_backend(&self) -> Result<Arc<dyn Backend>> {
        match &self.backend {
            Some(b) => Ok(b.clone()),
            None => default_backend().await,
        }
    }

    fn request(&self) -> Result<CreateRequest> {
        if let Some(field) = &self.invalid {
            return Err(not_a_duration(field.clone()));
        }
        let mut config = self.config.clone();
        config.driver = self
            .driver
            .as_deref()
            .map(str::parse::<DriverKind>)
            .transpose()?;
        Ok(CreateRequest {
            name: self.name.clone(),
            config,
            detached: self.detached,
            claim: false,
        })
    }

    /// Persists the sandbox without starting it.
    pub async fn define(self) -> Result<SandboxHandle> {
        let backend = self.resolve_backend().await?;
        let info = backend.create(self.request()?).await?;
        Ok(SandboxHandle::from_info(backend, &info))
    }

    /// Creates and starts the sandbox (strict: an existing name is
    /// [`Error::AlreadyExists`]).
    pub async fn create(self) -> Result<Sandbox> {
        let backend = self.resolve_backend().await?;
        let info = backend.create(self.request()?.claiming(true)).await?;
        // Claimed from a warm pool: running already.
        if info.status == crate::model::Status::Running {
            return Ok(Sandbox::bind(backend, &info));
        }
        let info = backend
            .start(&info.name, &info.id, StartOptions::default())
            .await?;
        Ok(Sandbox::bind(backend, &info))
    }

    /// Converges on the sandbox of this name: connects to it if it exists
    /// (starting it if needed, its own configuration winning), otherwise
    /// creates it. Many callers in many processes end up with the same id.
    pub async fn connect_or_create(self) -> Result<Sandbox> {
        let backend = self.resolve_backend().await?;
        loop {
            match backend.get(&self.name).await {
                Ok(info) => {
                    match backend
                        .connect_or_start(&info.name, &info.id, StartOptions::default())
                        .await
                    {
                        Ok(info) => return Ok(Sandbox::bind(backend, &info)),
                        // Removed (and maybe recreated) between the lookup and
                        // the start: look again.
                        Err(Error::NotFound { .. } | Error::SandboxReplaced { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(Error::NotFound { .. }) => {
                    match backend.create(self.request()?.claiming(true)).await {
                        Ok(info) => {
                            let info = backend
                                .connect_or_start(&info.name, &info.id, StartOptions::default())
                                .await?;
                            return Ok(Sandbox::bind(backend, &info));
                        }
                        Err(Error::AlreadyExists { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl ReplaceBuilder {
    /// Destroys any sandbox of this name, then creates and starts a new one
    /// (with a new id).
    pub async fn create(self) -> Result<Sandbox> {
        let backend = self.inner.resolve_backend().await?;
        loop {
            match backend.get(&self.inner.name).await {
                Ok(info) => match backend.destroy(&info.name, &info.id).await {
                    Ok(()) | Err(Error::NotFound { .. }) | Err(Error::SandboxReplaced { .. }) => {}
                    Err(e) => return Err(e),
                },
                Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            match self.inner.clone().backend(backend.clone()).create().await {
                Err(Error::AlreadyExists { .. }) => continue,
                other => return other,
            }
        }
    }
}
