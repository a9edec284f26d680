//! `burrow serve token ...` and `burrow serve tenant ...`: API tokens and
//! the tenants they belong to, in the server's database.

use burrow::Error;
use burrow_server::store::Store;
use burrow_server::tenancy::{validate_tenant, Role, DEFAULT_TENANT};
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
        /// What it may do in its tenant: admin (everything, and the
        /// server's /metrics), tenant_admin (everything in the tenant),
        /// operator (sandboxes and the gateway, not pool definitions nor
        /// URL targets), read_only.
        #[arg(long, default_value = "admin", value_parser = parse_role)]
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
    /// Create a tenant (lowercase letters, digits and '-', 1..=32).
    Create {
        /// Its name.
        name: String,
    },
    /// List tenants and how many tokens each has.
    #[command(alias = "ls")]
    List,
    /// Remove a tenant and its tokens (its sandboxes stay in the engine
    /// until removed there; `default` cannot be removed).
    Rm {
        /// Its name.
        name: String,
    },
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
        TenantCommand::Create { name } => {
            validate_tenant(name)?;
            if !store.create_tenant(name).await? {
                return Err(Error::InvalidArgument {
                    argument: "name".into(),
                    reason: format!("a tenant named {name:?} exists"),
                }
                .into());
            }
            ctx.print(&json!({"created": name}), format_args!("created {name}"))?;
        }
        TenantCommand::List => {
            let tenants = store.list_tenants().await?;
            if ctx.json {
                return ctx.print_json(&json!({ "tenants": tenants }));
            }
            let rows: Vec<Vec<String>> = tenants
                .iter()
                .map(|t| vec![t.name.clone(), t.tokens.to_string()])
                .collect();
            print_table(&["NAME", "TOKENS"], &rows);
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
