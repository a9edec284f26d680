//! A guarding HTTP proxy, for clients that take a proxy but no connector
//! (the registry client): it listens on the host's loopback, answers only
//! requests that carry its own credentials (random, per proxy), and makes
//! every connection through its [`Guard`].
//!
//! It takes `CONNECT host:port` (HTTPS: after `200` the bytes are relayed
//! as they are) and plain HTTP requests in absolute form
//! (`GET http://host:port/path`: forwarded in origin form with
//! `Connection: close`, one request per connection, so that every request
//! is vetted). A refused connection is answered `403`, a failed one `502`;
//! the detail goes to the log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{Guard, OutboundError};

/// Longest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Most headers in a request head.
const MAX_HEADERS: usize = 64;
/// The user name of the proxy's credentials.
const USER: &str = "burrow";

/// A running guarding proxy; it stops when dropped.
#[derive(Debug)]
pub struct GuardProxy {
    addr: SocketAddr,
    password: String,
    task: JoinHandle<()>,
}

impl Drop for GuardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GuardProxy {
    /// Starts a proxy on a free loopback port (within a tokio runtime).
    pub async fn start(guard: Arc<Guard>) -> std::io::Result<GuardProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let password: String = (0..32)
            .map(|_| {
                char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rand::random::<usize>() % 36])
            })
            .collect();
        let expected = format!("Basic {}", base64(format!("{USER}:{password}").as_bytes()));
        let expected = Arc::new(expected);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (guard, expected) = (guard.clone(), expected.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve(client, &guard, &expected).await {
                        tracing::debug!(error = %e, "guard proxy: a client's connection ended");
                    }
                });
            }
        });
        Ok(GuardProxy {
            addr,
            password,
            task,
        })
    }

    /// The proxy's URL, credentials included
    /// (`http://burrow:PASSWORD@127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{USER}:{}@{}", self.password, self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Serves one client connection.
async fn serve(mut client: TcpStream, guard: &Guard, expected: &str) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let head_len = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client, &mut buf)).await
    {
        Ok(Ok(Some(n))) => n,
        Ok(Ok(None)) => return answer(&mut client, "400 Bad Request").await,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Ok(()),
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    if !matches!(
        req.parse(&buf[..head_len]),
        Ok(httparse::Status::Complete(_))
    ) {
        return answer(&mut client, "400 Bad Request").await;
    }
    let authorized = req.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("proxy-authorization") && h.value == expected.as_bytes()
    });
    if !authorized {
        return answer(
            &mut client,
            "407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"burrow\"",
        )
        .await;
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return answer(&mut client, "400 Bad Request").await;
    };
    let rest = buf[head_len..].to_vec();
    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_authority(target, None) else {
            return answer(&mut client, "400 Bad Request").await;
        };
        let mut upstream = match guard.connect(&host, port).await {
            Ok(s) => s,
            Err(e) => return refuse(&mut client, &e).await,
        };
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        upstream.write_all(&rest).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        return Ok(());
    }
    // Plain HTTP, in absolute form.
    let Some(after) = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
    else {
        return answer(&mut client, "400 Bad Request").await;
    };
    let (authority, path) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    let path = match path {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    let Some((host, port)) = split_authority(authority, Some(80)) else {
        return answer(&mut client, "400 Bad Request").await;
    };
    let mut upstream = match guard.connect(&host, port).await {
        Ok(s) => s,
        Err(e) => return refuse(&mut client, &e).await,
    };
    let mut head = format!("{method} {path} HTTP/1.{version}\r\n");
    for h in req.headers.iter() {
        let hop = [
            "proxy-authorization",
            "proxy-connection",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|n| h.name.eq_ignore_ascii_case(n));
        if !hop {
            head.push_str(h.name);
            head.push_str(": ");
            head.push_str(&String::from_utf8_lossy(h.value));
            head.push_str("\r\n");
        }
    }
    head.push_str("Connection: close\r\n\r\n");
    upstream.write_all(head.as_bytes()).await?;
    upstream.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Reads until the end of a request head; its length, or `None` when the
/// client closed first or the head is too long.
async fn read_head(client: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(i + 4));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// `host:port` (`[v6]:port`), with `default` when the port is left out.
fn split_authority(authority: &str, default: Option<u16>) -> Option<(String, u16)> {
    if authority.contains('@') || authority.is_empty() {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => default?,
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// Answers a refused or failed connection; the detail goes to the log.
async fn refuse(client: &mut TcpStream, e: &OutboundError) -> std::io::Result<()> {
    tracing::warn!("outbound guard: {e}");
    let status = if e.is_refused() {
        "403 Forbidden"
    } else {
        "502 Bad Gateway"
    };
    answer(client, status).await
}

async fn answer(client: &mut TcpStream, status: &str) -> std::io::Result<()> {
    client
        .write_all(
            format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    client.shutdown().await
}

/// Standard base64 with padding.
pub(crate) fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_authorities() {
        assert_eq!(
            base64(b"Aladdin:open sesame"),
            "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(split_authority("h:443", None), Some(("h".to_owned(), 443)));
        assert_eq!(
            split_authority("[::1]:80", None),
            Some(("::1".to_owned(), 80))
        );
        assert_eq!(split_authority("h", Some(80)), Some(("h".to_owned(), 80)));
        assert_eq!(split_authority("h", None), None);
        assert_eq!(split_authority("u@h:1", None), None);
        assert_eq!(split_authority("h:0", None), None);
    }
}
