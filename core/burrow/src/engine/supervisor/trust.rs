//! The sandbox's CA in the guest's trust store, written through the agent
//! at each start (before anything runs): appended, between marker lines
//! that the next start replaces, to each system bundle the image has
//! (Debian/Ubuntu/Alpine, Fedora/RHEL, openSUSE), or a Debian-style bundle
//! made where it has none; and on its own at [`SANDBOX_CA_FILE`] (which
//! `NODE_EXTRA_CA_CERTS` names).

use burrow_protocol::{GuestErrorCode, GuestMsg, Request, Response};

use crate::channel::client::AgentClient;
use crate::model::SANDBOX_CA_FILE;

/// The system bundles, the first being the one made where none exists.
const BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];
const BEGIN: &str = "# burrow sandbox CA: begin\n";
const END: &str = "# burrow sandbox CA: end\n";
/// The largest bundle read.
const MAX_BUNDLE: usize = 16 << 20;

/// Installs `pem` (the CA's certificate) in the guest's trust store.
pub(super) async fn install_ca(agent: &AgentClient, pem: &str) -> Result<(), String> {
    let mut written = false;
    for path in BUNDLES {
        let Some(bundle) = read(agent, path).await? else {
            continue;
        };
        let mut text = without_block(&String::from_utf8_lossy(&bundle));
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&block(pem));
        write(agent, path, text.as_bytes()).await?;
        written = true;
    }
    if !written {
        call(
            agent,
            Request::Mkdir {
                path: "/etc/ssl/certs".into(),
                parents: true,
            },
        )
        .await?;
        write(agent, BUNDLES[0], block(pem).as_bytes()).await?;
    }
    write(agent, SANDBOX_CA_FILE, pem.as_bytes()).await
}

fn block(pem: &str) -> String {
    let nl = if pem.ends_with('\n') { "" } else { "\n" };
    format!("{BEGIN}{pem}{nl}{END}")
}

/// `bundle` without an earlier start's block.
fn without_block(bundle: &str) -> String {
    match (bundle.find(BEGIN), bundle.find(END)) {
        (Some(b), Some(e)) if e > b => format!("{}{}", &bundle[..b], &bundle[e + END.len()..]),
        _ => bundle.to_owned(),
    }
}

async fn call(agent: &AgentClient, req: Request) -> Result<Response, String> {
    match agent.call(req).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(g)) => Err(g.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// A guest file's content; `None` where it does not exist.
async fn read(agent: &AgentClient, path: &str) -> Result<Option<Vec<u8>>, String> {
    let mut req = agent
        .request(Request::ReadFile { path: path.into() })
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(msg) = req.next().await {
        match msg {
            GuestMsg::Stdout { data, .. } => {
                out.extend_from_slice(&data.0);
                if out.len() > MAX_BUNDLE {
                    return Err(format!("{path} is larger than {MAX_BUNDLE} bytes"));
                }
            }
            GuestMsg::Response { result, .. } => {
                return match result {
                    Ok(_) => Ok(Some(out)),
                    Err(g) if g.code == GuestErrorCode::NotFound => Ok(None),
                    Err(g) => Err(format!("reading {path}: {g}")),
                };
            }
            _ => {}
        }
    }
    Err(format!("reading {path}: the agent's channel closed"))
}

async fn write(agent: &AgentClient, path: &str, data: &[u8]) -> Result<(), String> {
    let req = agent
        .request(Request::WriteFile {
            path: path.into(),
            mode: Some(0o644),
            append: false,
        })
        .map_err(|e| e.to_string())?;
    let input = req.input();
    input.send_data(data).await.map_err(|e| e.to_string())?;
    input.send_eof().map_err(|e| e.to_string())?;
    match req.response().await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(g)) => Err(format!("writing {path}: {g}")),
        Err(e) => Err(format!("writing {path}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_start_replaces_its_block() {
        let first = format!("SYSTEM\n{}", block("PEM1\n"));
        let second = format!("{}{}", without_block(&first), block("PEM2"));
        assert_eq!(second, format!("SYSTEM\n{BEGIN}PEM2\n{END}"));
        assert_eq!(without_block("no block"), "no block");
    }
}
