//! The server address (`http://host:port[/prefix]`,
//! `https://host:port[/prefix]` or `unix:/path.sock`) and the
//! percent-encoding of path segments.

use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// HTTP over TCP, or over TLS over TCP (`https://`).
    Tcp {
        /// Whether the connection is TLS (`https://`); the host is the
        /// name the server's certificate must hold (and the SNI).
        tls: bool,
        /// Host name or address (IPv6 without brackets).
        host: String,
        /// Port.
        port: u16,
        /// The `Host` header: the authority as written in the URL.
        authority: String,
        /// Path prefix without a trailing `/` (empty: none).
        prefix: String,
    },
    /// HTTP over a unix socket.
    Unix {
        /// Absolute socket path.
        path: PathBuf,
    },
}

impl Endpoint {
    /// Parses a server URL; `field` names the setting in errors
    /// (`"url"` or `"BURROW_URL"`).
    pub(crate) fn parse(url: &str, field: &str) -> Result<Endpoint> {
        let fail = |reason: String| Error::InvalidConfig {
            field: field.to_owned(),
            reason,
        };
        let url = url.trim();
        if url.is_empty() {
            return Err(fail("the server URL is empty".into()));
        }
        if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(fail(format!(
                "{url:?} contains whitespace or control characters"
            )));
        }
        let lower = url.to_ascii_lowercase();
        if let Some(rest) = strip_prefix_ci(url, &lower, "unix:") {
            let path = PathBuf::from(rest);
            if !path.is_absolute() {
                return Err(fail(format!(
                    "{url:?}: a unix socket URL needs an absolute path (unix:/path/to/burrow.sock)"
                )));
            }
            return Ok(Endpoint::Unix { path });
        }
        let (tls, rest) = if let Some(rest) = strip_prefix_ci(url, &lower, "https://") {
            (true, rest)
        } else if let Some(rest) = strip_prefix_ci(url, &lower, "http://") {
            (false, rest)
        } else {
            return Err(fail(format!(
                "{url:?} is not a burrow server URL (http://host:port[/prefix], \
                 https://host:port[/prefix] or unix:/path.sock)"
            )));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if path.contains(['?', '#']) || authority.contains(['?', '#']) {
            return Err(fail(format!(
                "{url:?}: a server URL has no query or fragment"
            )));
        }
        if authority.contains('@') {
            return Err(fail(format!(
                "{url:?}: credentials go in the token (BURROW_TOKEN), not in the URL"
            )));
        }
        if authority.is_empty() {
            return Err(fail(format!("{url:?} has no host")));
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = split_host_port(authority, default_port)
            .ok_or_else(|| fail(format!("{url:?} does not name a valid host[:port]")))?;
        if http::uri::Authority::from_str(authority).is_err() {
            return Err(fail(format!("{url:?} does not name a valid host[:port]")));
        }
        if tls && super::tls::server_name(&host).is_none() {
            return Err(fail(format!(
                "{url:?}: {host:?} is not a name a TLS certificate can hold (a DNS name or an IP \
                 address)"
            )));
        }
        let prefix = path.trim_end_matches('/');
        if !prefix.is_empty() && http::uri::PathAndQuery::from_str(prefix).is_err() {
            return Err(fail(format!("{url:?} has an invalid path")));
        }
        Ok(Endpoint::Tcp {
            tls,
            host,
            port,
            authority: authority.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// Whether connections are TLS (`https://`).
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Endpoint::Tcp { tls: true, .. })
    }

    /// The value of the `Host` header.
    pub(crate) fn host_header(&self) -> &str {
        match self {
            Endpoint::Tcp { authority, .. } => authority,
            Endpoint::Unix { .. } => "localhost",
        }
    }

    /// The path prefix every request path is appended to.
    pub(crate) fn prefix(&self) -> &str {
        match self {
            Endpoint::Tcp { prefix, .. } => prefix,
            Endpoint::Unix { .. } => "",
        }
    }
}

fn strip_prefix_ci<'a>(url: &'a str, lower: &str, prefix: &str) -> Option<&'a str> {
    // `lower` is `url` in ASCII lowercase: the same byte offsets.
    lower.starts_with(prefix).then(|| &url[prefix.len()..])
}

/// `host`, `host:port`, `[v6]`, `[v6]:port` (`default_port` when none is
/// given).
fn split_host_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return None;
        }
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':')?)),
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None => default_port,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u16>().ok().filter(|p| *p != 0)?
        }
        Some(_) => return None,
    };
    Some((host.to_owned(), port))
}

/// Percent-encodes one path segment: everything but the unreserved
/// characters (`A-Z a-z 0-9 - . _ ~`) is escaped, `/` included.
pub(crate) fn encode_segment(segment: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(segment.len());
    for &b in segment.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    fn tcp(url: &str) -> (String, u16, String, String) {
        match Endpoint::parse(url, "url").unwrap() {
            Endpoint::Tcp {
                tls: false,
                host,
                port,
                authority,
                prefix,
            } => (host, port, authority, prefix),
            other => panic!("{other:?}"),
        }
    }

    fn tls(url: &str) -> (String, u16, String, String) {
        match Endpoint::parse(url, "url").unwrap() {
            Endpoint::Tcp {
                tls: true,
                host,
                port,
                authority,
                prefix,
            } => (host, port, authority, prefix),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn http_urls() {
        assert_eq!(
            tcp("http://127.0.0.1:7070"),
            ("127.0.0.1".into(), 7070, "127.0.0.1:7070".into(), "".into())
        );
        assert_eq!(
            tcp("http://burrow.internal"),
            (
                "burrow.internal".into(),
                80,
                "burrow.internal".into(),
                "".into()
            )
        );
        assert_eq!(
            tcp("HTTP://host:8080/"),
            ("host".into(), 8080, "host:8080".into(), "".into())
        );
        assert_eq!(
            tcp("http://host:8080/api/burrow/"),
            (
                "host".into(),
                8080,
                "host:8080".into(),
                "/api/burrow".into()
            )
        );
        assert_eq!(
            tcp("http://[::1]:9000/x"),
            ("::1".into(), 9000, "[::1]:9000".into(), "/x".into())
        );
        assert_eq!(tcp("http://[::1]").1, 80);
        let e = Endpoint::parse("http://h:1", "url").unwrap();
        assert_eq!(e.host_header(), "h:1");
        assert_eq!(e.prefix(), "");
    }

    #[test]
    fn https_urls() {
        assert_eq!(
            tls("https://127.0.0.1:7878"),
            ("127.0.0.1".into(), 7878, "127.0.0.1:7878".into(), "".into())
        );
        // Port 443 by default.
        assert_eq!(
            tls("https://burrow.example.com"),
            (
                "burrow.example.com".into(),
                443,
                "burrow.example.com".into(),
                "".into()
            )
        );
        assert_eq!(
            tls("HTTPS://host:8443/api/burrow/"),
            (
                "host".into(),
                8443,
                "host:8443".into(),
                "/api/burrow".into()
            )
        );
        assert_eq!(
            tls("https://[::1]/x"),
            ("::1".into(), 443, "[::1]".into(), "/x".into())
        );
        let e = Endpoint::parse("https://h:1", "url").unwrap();
        assert!(e.is_tls());
        assert!(!Endpoint::parse("http://h:1", "url").unwrap().is_tls());
        assert!(!Endpoint::parse("unix:/s.sock", "url").unwrap().is_tls());
        assert_eq!(e.host_header(), "h:1");
    }

    #[test]
    fn unix_urls() {
        let e = Endpoint::parse("unix:/run/burrow/serve.sock", "url").unwrap();
        assert_eq!(
            e,
            Endpoint::Unix {
                path: "/run/burrow/serve.sock".into()
            }
        );
        assert_eq!(e.host_header(), "localhost");
        assert_eq!(e.prefix(), "");
    }

    #[test]
    fn bad_urls_are_invalid_config() {
        for bad in [
            "",
            "   ",
            "https://",
            "https://host:0",
            "https://u:p@host",
            "https://host:443?x",
            "httpx://host",
            "unix:relative.sock",
            "unix:",
            "unix:./x.sock",
            "ftp://host",
            "host:8080",
            "garbage",
            "http://",
            "http:///path",
            "http://host:port",
            "http://host:",
            "http://host:99999",
            "http://host:0",
            "http://user:pw@host:80",
            "http://host:80/x?y=1",
            "http://host:80#frag",
            "http://ho st:80",
            "http://[zz]:80",
            "http://[::1]x",
            "http://a:1:2",
        ] {
            let err = Endpoint::parse(bad, "BURROW_URL").unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidConfig, "{bad:?}");
            match err {
                Error::InvalidConfig { field, .. } => assert_eq!(field, "BURROW_URL"),
                other => panic!("{other:?}"),
            }
        }
        match Endpoint::parse("https://x:99999", "url").unwrap_err() {
            Error::InvalidConfig { field, .. } => assert_eq!(field, "url"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode_segment("worker-1.a_b~"), "worker-1.a_b~");
        assert_eq!(encode_segment("a b/c?d#e%f"), "a%20b%2Fc%3Fd%23e%25f");
        assert_eq!(encode_segment("é€"), "%C3%A9%E2%82%AC");
        assert_eq!(encode_segment("a+b&c=d"), "a%2Bb%26c%3Dd");
        assert_eq!(encode_segment(""), "");
        // Decoding gives the segment back.
        let name = "naïve worker/ä?#%+";
        let enc = encode_segment(name);
        assert!(enc.bytes().all(|b| b.is_ascii_graphic() && b != b'/'));
        let dec: Vec<u8> = {
            let b = enc.as_bytes();
            let mut out = Vec::new();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'%' {
                    let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 3;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            out
        };
        assert_eq!(String::from_utf8(dec).unwrap(), name);
    }
}
