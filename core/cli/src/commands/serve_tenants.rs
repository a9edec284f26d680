//! `burrow serve token ...`, `burrow serve tenant ...` and `burrow serve
//! audit`: API tokens, the tenants they belong to, and the audit log, in
//! the server's database.

use burrow::Error;
use burrow_server::store::{Quotas, Store, TenantRules};
use burrow_server::tenancy::{
    normalize_image_entry, normalize_registry, validate_tenant, Role, DEFAULT_TENANT,
};
use clap::Subcommand;
use serde_json::json;

use super::common::{ago, print_table};
use super::Ctx;

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Create a token; its secret is printed once.
    Create {
        /// A name for the token (unique).
        name: String,
        /// The tenant it belongs to (which must exist).
        #[arg(long, default_value = DEFAULT_TENANT)]
        tenant: String,
        /// What it may do in its tenant (required: there is no default, so
        /// no token gets more than its maker meant): admin (everything,
        /// and, in the default tenant, the server's /metrics),
        /// tenant_admin (everything in the tenant), operator (sandboxes and
        /// the gateway, not pool definitions nor URL targets), read_only.
        #[arg(long, value_parser = parse_role)]
        role: Role,
    },
    /// List tokens: name, tenant, role (never their secrets).
    List,
    /// Revoke a token by name.
    Revoke {
        /// The token's name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TenantCommand {
    /// Create a tenant (lowercase letters, digits and '-', 1..=32), with
    /// the limits and rules given (none by default: any image, no maximum
    /// per sandbox).
    Create {
        /// Its name.
        name: String,
        #[command(flatten)]
        limits: Limits,
        #[command(flatten)]
        rules: Rules,
    },
    /// Change a tenant's limits and rules: those given (`none` lifts a
    /// limit, --allow-any-image the image lists), the others as they were.
    Set {
        /// Its name.
        name: String,
        #[command(flatten)]
        limits: Limits,
        #[command(flatten)]
        rules: Rules,
    },
    /// List tenants, their limits and how many tokens each has.
    #[command(alias = "ls")]
    List,
    /// Remove a tenant and its tokens (its sandboxes stay in the engine
    /// until removed there; `default` cannot be removed).
    Rm {
        /// Its name.
        name: String,
    },
}

/// A tenant's limits on the command line (`none`: no limit).
#[derive(Debug, clap::Args)]
pub(crate) struct Limits {
    /// Sandboxes in any status (a pool's warm sandboxes count at its size).
    #[arg(long, value_name = "N|none", value_parser = limit::<u64>)]
    max_sandboxes: Option<Limit<u64>>,
    /// Sandboxes with a runtime (starting, running, draining, paused).
    #[arg(long, value_name = "N|none", value_parser = limit::<u64>)]
    max_running: Option<Limit<u64>>,
    /// The running sandboxes' CPUs, summed (one without a limit counts 1).
    #[arg(long, value_name = "CPUS|none", value_parser = limit::<f64>)]
    max_cpus: Option<Limit<f64>>,
    /// The running sandboxes' memory, summed: MiB or with a unit (8G); one
    /// without a limit counts 512 MiB.
    #[arg(long, value_name = "SIZE|none", value_parser = memory_limit)]
    max_memory: Option<Limit<u64>>,
    /// Starts in any minute.
    #[arg(long, value_name = "N|none", value_parser = limit::<u64>)]
    max_starts_per_minute: Option<Limit<u64>>,
}

/// What a tenant's sandboxes may use and have, on the command line (not
/// for the default tenant, which keeps the engine's freedom).
#[derive(Debug, clap::Args)]
pub(crate) struct Rules {
    /// An image its sandboxes may use (repeat for more; replaces the
    /// tenant's list): a repository (`busybox`: any tag or digest of it), a
    /// tag (`busybox:1.36`), a digest (`busybox@sha256:...`) or a prefix
    /// ending in '/' (`ghcr.io/acme/`). Any spelling of a reference is the
    /// same image; a snapshot is allowed when its image is. With
    /// --allow-registry, an image either allows may be used.
    #[arg(long, value_name = "REF|PREFIX/")]
    allow_image: Vec<String>,
    /// A registry whose images its sandboxes may use (`docker.io`,
    /// `ghcr.io`, `registry.example.com:5000`; repeat for more; replaces
    /// the tenant's list).
    #[arg(long, value_name = "HOST")]
    allow_registry: Vec<String>,
    /// Lift the image and registry lists: any image (the default).
    #[arg(long, conflicts_with_all = ["allow_image", "allow_registry"])]
    allow_any_image: bool,
    /// The most memory one sandbox may have: MiB or with a unit (1G). A
    /// sandbox that names none gets the default (512 MiB) or this if less.
    #[arg(long, value_name = "SIZE|none", value_parser = memory_limit)]
    sandbox_max_memory: Option<Limit<u64>>,
    /// The most CPUs one sandbox may have; one that names none gets the
    /// default (1) or this if less.
    #[arg(long, value_name = "CPUS|none", value_parser = limit::<f64>)]
    sandbox_max_cpus: Option<Limit<f64>>,
}

impl Rules {
    /// Whether any rule is given.
    fn any(&self) -> bool {
        !self.allow_image.is_empty()
            || !self.allow_registry.is_empty()
            || self.allow_any_image
            || self.sandbox_max_memory.is_some()
            || self.sandbox_max_cpus.is_some()
    }

    /// `r` with these rules applied, checked and normalized, for `tenant`.
    fn apply(&self, tenant: &str, mut r: TenantRules) -> Result<TenantRules, Error> {
        if tenant == DEFAULT_TENANT && self.any() {
            return Err(Error::InvalidArgument {
                argument: "name".into(),
                reason: "the default tenant keeps the engine's freedom: image lists and \
                         maximums per sandbox are for other tenants"
                    .into(),
            });
        }
        if self.allow_any_image {
            r.allowed_images = None;
            r.allowed_registries = None;
        }
        if !self.allow_image.is_empty() {
            let images: Result<Vec<String>, Error> = self
                .allow_image
                .iter()
                .map(|e| normalize_image_entry(e))
                .collect();
            r.allowed_images = Some(images?);
        }
        if !self.allow_registry.is_empty() {
            let hosts: Result<Vec<String>, Error> = self
                .allow_registry
                .iter()
                .map(|h| normalize_registry(h))
                .collect();
            r.allowed_registries = Some(hosts?);
        }
        if let Some(Limit(v)) = self.sandbox_max_memory {
            if v == Some(0) {
                return Err(Error::InvalidArgument {
                    argument: "sandbox-max-memory".into(),
                    reason: "must be more than 0".into(),
                });
            }
            r.sandbox_max_memory_mb = v;
        }
        if let Some(Limit(v)) = self.sandbox_max_cpus {
            if v.is_some_and(|c| !c.is_finite() || c <= 0.0) {
                return Err(Error::InvalidArgument {
                    argument: "sandbox-max-cpus".into(),
                    reason: "must be a number of CPUs, more than 0".into(),
                });
            }
            r.sandbox_max_cpus = v;
        }
        Ok(r)
    }
}

/// A limit, or `none`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit<T>(Option<T>);

fn limit<T: std::str::FromStr>(s: &str) -> Result<Limit<T>, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    s.parse()
        .map(|v| Limit(Some(v)))
        .map_err(|_| format!("{s:?} is not a number (or none)"))
}

fn memory_limit(s: &str) -> Result<Limit<u64>, String> {
    if s == "none" {
        return Ok(Limit(None));
    }
    super::common::parse_mib(s).map(|v| Limit(Some(v)))
}

impl Limits {
    /// `q` with these limits applied.
    fn apply(&self, mut q: Quotas) -> Result<Quotas, Error> {
        if let Some(Limit(v)) = self.max_sandboxes {
            q.max_sandboxes = v;
        }
        if let Some(Limit(v)) = self.max_running {
            q.max_running = v;
        }
        if let Some(Limit(v)) = self.max_cpus {
            if v.is_some_and(|c| !c.is_finite() || c < 0.0) {
                return Err(Error::InvalidArgument {
                    argument: "max-cpus".into(),
                    reason: "must be a number of CPUs, 0 or more".into(),
                });
            }
            q.max_cpus = v;
        }
        if let Some(Limit(v)) = self.max_memory {
            q.max_memory_mb = v;
        }
        if let Some(Limit(v)) = self.max_starts_per_minute {
            q.max_starts_per_minute = v;
        }
        Ok(q)
    }
}

fn shown<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| {
        let all: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
        format!("one of {}", all.join(", "))
    })
}

fn no_tenant(name: &str) -> Error {
    Error::NotFound {
        what: format!("tenant {name:?}"),
        name: Some(name.to_owned()),
        id: None,
    }
}

pub(crate) async fn token(ctx: &Ctx, store: &Store, command: &TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create { name, tenant, role } => {
            if store.list_tokens().await?.iter().any(|t| &t.name == name) {
                return Err(Error::InvalidArgument {
                    argument: "name".into(),
                    reason: format!("a token named {name:?} exists (names are unique)"),
                }
                .into());
            }
            let secret = store
                .create_token(name, tenant, *role)
                .await?
                .ok_or_else(|| no_tenant(tenant))?;
            ctx.print(
                &json!({"name": name, "tenant": tenant, "role": role, "token": secret}),
                format_args!("{secret}"),
            )?;
        }
        TokenCommand::List => {
            let tokens = store.list_tokens().await?;
            if ctx.json {
                return ctx.print_json(&json!({ "tokens": tokens }));
            }
            let now = burrow_server::store::now_ms();
            let rows: Vec<Vec<String>> = tokens
                .iter()
                .map(|t| {
                    vec![
                        t.name.clone(),
                        t.tenant.clone(),
                        t.role.as_str().into(),
                        ago(now - t.created_at),
                    ]
                })
                .collect();
            print_table(&["NAME", "TENANT", "ROLE", "CREATED"], &rows);
        }
        TokenCommand::Revoke { name } => {
            if !store.revoke_token(name).await? {
                return Err(Error::NotFound {
                    what: format!("token {name:?}"),
                    name: Some(name.clone()),
                    id: None,
                }
                .into());
            }
            ctx.print(&json!({"revoked": name}), format_args!("revoked {name}"))?;
        }
    }
    Ok(())
}

pub(crate) async fn tenant(
    ctx: &Ctx,
    store: &Store,
    command: &TenantCommand,
) -> anyhow::Result<()> {
    match command {
        TenantCommand::Create {
            name,
            limits,
            rules,
        } => {
            validate_tenant(name)?;
            let quotas = limits.apply(Quotas::default())?;
            let rules = rules.apply(name, TenantRules::default())?;
            if !store.create_tenant(name).await? {
                return Err(Error::InvalidArgument {
                    argument: "name".into(),
                    reason: format!("a tenant named {name:?} exists"),
                }
                .into());
            }
            store.set_quotas(name, &quotas).await?;
            store.set_tenant_rules(name, &rules).await?;
            ctx.print(
                &json!({"created": name, "quotas": quotas, "rules": rules}),
                format_args!("created {name}"),
            )?;
        }
        TenantCommand::Set {
            name,
            limits,
            rules,
        } => {
            let current = store.quotas(name).await?.ok_or_else(|| no_tenant(name))?;
            let quotas = limits.apply(current)?;
            let current = store.tenant_rules(name).await?.unwrap_or_default();
            let rules = rules.apply(name, current)?;
            if !store.set_quotas(name, &quotas).await?
                || !store.set_tenant_rules(name, &rules).await?
            {
                return Err(no_tenant(name).into());
            }
            ctx.print(
                &json!({"tenant": name, "quotas": quotas, "rules": rules}),
                format_args!("{name}: limits set"),
            )?;
        }
        TenantCommand::List => {
            let mut out = Vec::new();
            for t in store.list_tenants().await? {
                let q = store.quotas(&t.name).await?.unwrap_or_default();
                let r = store.tenant_rules(&t.name).await?.unwrap_or_default();
                out.push((t, q, r));
            }
            if ctx.json {
                let tenants: Vec<_> = out
                    .iter()
                    .map(|(t, q, r)| json!({"name": t.name, "tokens": t.tokens, "created_at": t.created_at, "quotas": q, "rules": r}))
                    .collect();
                return ctx.print_json(&json!({ "tenants": tenants }));
            }
            let rows: Vec<Vec<String>> = out
                .iter()
                .map(|(t, q, r)| {
                    let images = match (&r.allowed_images, &r.allowed_registries) {
                        (None, None) => "any".to_owned(),
                        (i, g) => i
                            .iter()
                            .chain(g)
                            .flatten()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(","),
                    };
                    vec![
                        t.name.clone(),
                        t.tokens.to_string(),
                        shown(q.max_sandboxes),
                        shown(q.max_running),
                        shown(q.max_cpus),
                        shown(q.max_memory_mb),
                        shown(q.max_starts_per_minute),
                        shown(r.sandbox_max_memory_mb),
                        shown(r.sandbox_max_cpus),
                        images,
                    ]
                })
                .collect();
            print_table(
                &[
                    "NAME",
                    "TOKENS",
                    "SANDBOXES",
                    "RUNNING",
                    "CPUS",
                    "MEMORY_MB",
                    "STARTS/MIN",
                    "SB_MEMORY_MB",
                    "SB_CPUS",
                    "IMAGES",
                ],
                &rows,
            );
        }
        TenantCommand::Rm { name } => {
            if name == DEFAULT_TENANT {
                return Err(Error::InvalidArgument {
                    argument: "name".into(),
                    reason: "the default tenant cannot be removed".into(),
                }
                .into());
            }
            if !store.remove_tenant(name).await? {
                return Err(no_tenant(name).into());
            }
            ctx.print(&json!({"removed": name}), format_args!("removed {name}"))?;
        }
    }
    Ok(())
}

/// `burrow serve audit`.
#[derive(Debug, clap::Args)]
pub(crate) struct AuditArgs {
    /// Only this tenant's entries.
    #[arg(long)]
    tenant: Option<String>,
    /// Only the entries of this sandbox (or gateway target), by id.
    #[arg(long)]
    sandbox: Option<String>,
    /// Entries after this id (the `next` a page printed).
    #[arg(long, default_value_t = 0)]
    after: i64,
    /// At most this many entries.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    limit: u32,
}

pub(crate) async fn audit(ctx: &Ctx, store: &Store, args: &AuditArgs) -> anyhow::Result<()> {
    let filter = burrow_server::store::AuditFilter {
        tenant: args.tenant.clone(),
        sandbox: args.sandbox.clone(),
    };
    let entries = store.audit(&filter, args.after.max(0), args.limit).await?;
    let next = (entries.len() == args.limit as usize)
        .then(|| entries.last().map(|e| e.id))
        .flatten();
    if ctx.json {
        return ctx.print_json(&json!({ "entries": entries, "next": next }));
    }
    let now = burrow_server::store::now_ms();
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                ago(now - e.at_ms),
                shown(e.tenant.as_deref()),
                shown(e.token.as_deref()),
                shown(e.client.as_deref()),
                e.operation.clone(),
                shown(e.object.as_deref()),
                shown(e.sandbox.as_deref()),
                shown(e.status.map(|s| s.to_string()).as_deref()),
                e.outcome.as_str().to_owned(),
                shown(e.code.as_deref()),
            ]
        })
        .collect();
    print_table(
        &[
            "ID",
            "WHEN",
            "TENANT",
            "TOKEN",
            "CLIENT",
            "OPERATION",
            "OBJECT",
            "SANDBOX",
            "STATUS",
            "OUTCOME",
            "CODE",
        ],
        &rows,
    );
    if let Some(next) = next {
        eprintln!("more: burrow serve audit --after {next}");
    }
    Ok(())
}
