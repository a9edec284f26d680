//! Parsers of single values (booleans, integers, durations, listen
//! addresses, the database URL, the replica id, the home) and the defaults
//! computed from the environment.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use super::error::{invalid, ConfigError, Origin};
use super::resolve::Raw;
use super::sections::{DatabaseUrl, Listen};
use super::settings::{Setting, DATABASE, HOME};

/// Longest unix socket path the kernel accepts (`sun_path` minus the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Upper bound of every duration setting, so later arithmetic cannot overflow.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Longest replica id.
const MAX_REPLICA_ID: usize = 64;

/// Parses a duration written as text (a TOML string or an environment
/// variable) with [`burrow::parse_duration`], at most 365 days.
fn parse_duration_text(text: &str) -> Result<Duration, String> {
    let d = burrow::parse_duration(text).map_err(|e| e.to_string())?;
    bounded(d, text)
}

fn bounded(d: Duration, text: &str) -> Result<Duration, String> {
    if d > MAX_DURATION {
        Err(format!("`{text}` is too large; at most 365 days"))
    } else {
        Ok(d)
    }
}

/// Formats a duration the way [`burrow::parse_duration`] reads it (`1h30m`,
/// `250ms`, `0s`); sub-millisecond durations use `Debug` notation.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{d:?}");
    }
    let secs = d.as_secs();
    let mut out = String::new();
    for (n, unit) in [
        (secs / 3600, "h"),
        (secs % 3600 / 60, "m"),
        (secs % 60, "s"),
        (u64::from(d.subsec_millis()), "ms"),
    ] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

fn found_desc(v: &toml::Value) -> String {
    format!("{} `{v}`", v.type_str())
}

pub(super) fn as_str<'a>(raw: &Raw<'a>) -> Result<&'a str, String> {
    match raw {
        Raw::Env(s) => Ok(s),
        Raw::Toml(toml::Value::String(s)) => Ok(s),
        Raw::Toml(v) => Err(format!("expected a string, found {}", found_desc(v))),
    }
}

pub(super) fn parse_bool(raw: &Raw<'_>) -> Result<bool, String> {
    match raw {
        Raw::Toml(toml::Value::Boolean(b)) => Ok(*b),
        Raw::Toml(v) => Err(format!(
            "expected a boolean (true or false), found {}",
            found_desc(v)
        )),
        Raw::Env(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(format!("expected true, false, 1 or 0, found `{s}`")),
        },
    }
}

pub(super) fn parse_int(raw: &Raw<'_>) -> Result<i64, String> {
    match raw {
        Raw::Toml(toml::Value::Integer(n)) => Ok(*n),
        Raw::Toml(v) => Err(format!("expected an integer, found {}", found_desc(v))),
        Raw::Env(s) => s
            .trim()
            .parse()
            .map_err(|_| format!("expected an integer, found `{s}`")),
    }
}

pub(super) fn parse_duration_raw(raw: &Raw<'_>) -> Result<Duration, String> {
    match raw {
        Raw::Toml(toml::Value::Integer(n)) => match u64::try_from(*n) {
            Ok(secs) => bounded(Duration::from_secs(secs), &n.to_string()),
            Err(_) => Err(format!("{n} is negative")),
        },
        Raw::Toml(toml::Value::String(s)) => parse_duration_text(s),
        Raw::Toml(v) => Err(format!(
            "expected a duration (a string like \"30s\" or an integer number of seconds), found {}",
            found_desc(v)
        )),
        Raw::Env(s) => parse_duration_text(s),
    }
}

pub(super) fn positive_duration(raw: &Raw<'_>) -> Result<Duration, String> {
    let d = parse_duration_raw(raw)?;
    if d.is_zero() {
        Err("must be greater than zero".into())
    } else {
        Ok(d)
    }
}

pub(super) fn parse_listen(raw: &Raw<'_>) -> Result<Vec<Listen>, String> {
    let entries: Vec<&str> = match raw {
        Raw::Toml(toml::Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                toml::Value::String(s) => Ok(s.as_str()),
                other => Err(format!(
                    "expected an array of strings, found an element {}",
                    found_desc(other)
                )),
            })
            .collect::<Result<_, _>>()?,
        Raw::Toml(v) => {
            return Err(format!(
                "expected an array of strings such as [\"127.0.0.1:7878\"], found {}",
                found_desc(v)
            ))
        }
        Raw::Env(s) => s.split(',').map(str::trim).collect(),
    };
    if entries.iter().all(|e| e.is_empty()) {
        return Err("at least one listen address is required".into());
    }
    let mut out: Vec<Listen> = Vec::with_capacity(entries.len());
    for entry in entries {
        let listen = parse_listen_entry(entry)?;
        if out.contains(&listen) {
            return Err(format!("{listen} is listed twice"));
        }
        out.push(listen);
    }
    Ok(out)
}

fn parse_listen_entry(entry: &str) -> Result<Listen, String> {
    if entry.is_empty() {
        return Err("an empty listen address".into());
    }
    if let Some(path) = entry.strip_prefix("unix:") {
        let path = PathBuf::from(path);
        if !path.is_absolute() {
            return Err(format!(
                "`{entry}`: a unix socket path must be absolute (unix:/path/to/socket)"
            ));
        }
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(format!(
                "`{entry}`: a unix socket path is at most {MAX_SOCKET_PATH} bytes"
            ));
        }
        return Ok(Listen::Unix(path));
    }
    SocketAddr::from_str(entry).map(Listen::Tcp).map_err(|_| {
        format!(
            "`{entry}` is neither an IP address and port (127.0.0.1:7878, [::1]:7878; host \
             names are not accepted) nor unix:/absolute/path"
        )
    })
}

pub(super) fn parse_database(raw: &Raw<'_>) -> Result<DatabaseUrl, String> {
    let url = as_str(raw)?;
    if url.is_empty() {
        return Err("the database URL is empty".into());
    }
    if url.starts_with("sqlite:") {
        sqlx::sqlite::SqliteConnectOptions::from_str(url)
            .map_err(|e| format!("not a valid SQLite URL: {e}"))?;
        Ok(DatabaseUrl::Sqlite(url.to_owned()))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        sqlx::postgres::PgConnectOptions::from_str(url)
            .map_err(|e| format!("not a valid Postgres URL: {e}"))?;
        Ok(DatabaseUrl::Postgres(url.to_owned()))
    } else {
        // Never echo the URL: it may hold a password.
        let scheme = match url.split_once(':') {
            Some((scheme, _))
                if !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
            {
                format!("scheme `{scheme}` is not supported")
            }
            _ => "not a URL".to_owned(),
        };
        Err(format!(
            "{scheme}; accepted: sqlite:<path>, postgres://... or postgresql://..."
        ))
    }
}

pub(super) fn parse_replica_id(raw: &Raw<'_>) -> Result<String, String> {
    let id = as_str(raw)?;
    let len = id.chars().count();
    if !(1..=MAX_REPLICA_ID).contains(&len) {
        return Err(format!(
            "`{id}` is {len} characters long; a replica id is 1..={MAX_REPLICA_ID}"
        ));
    }
    if let Some(c) = id.chars().find(|c| !replica_char(*c)) {
        return Err(format!(
            "`{id}` contains {c:?}; a replica id uses only A-Z, a-z, 0-9, '.', '_' and '-'"
        ));
    }
    Ok(id.to_owned())
}

pub(super) fn replica_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// `<hostname>-<pid>`, the hostname sanitised and shortened to fit.
pub(super) fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "burrow".to_owned());
    let pid = std::process::id().to_string();
    let room = MAX_REPLICA_ID - pid.len() - 1;
    let host: String = host
        .chars()
        .map(|c| if replica_char(c) { c } else { '-' })
        .take(room)
        .collect();
    format!("{host}-{pid}")
}

pub(super) fn parse_file_home(raw: &Raw<'_>) -> Result<PathBuf, String> {
    let home = as_str(raw)?;
    let path = PathBuf::from(home);
    if home.is_empty() || !path.is_absolute() {
        return Err(format!("`{home}` is not an absolute path"));
    }
    Ok(path)
}

/// Like `burrow::LocalBackend::open_at`: a relative path is taken from the current
/// directory. `setting` is the one an error names.
pub(super) fn absolute(
    path: PathBuf,
    origin: &Origin,
    setting: Setting,
) -> Result<PathBuf, ConfigError> {
    if path.is_absolute() {
        return Ok(path);
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(&path))
        .map_err(|e| {
            invalid(
                origin,
                setting,
                format!(
                    "{} is relative and the current directory is unknown: {e}",
                    path.display()
                ),
            )
        })
}

/// What `burrow::LocalBackend::default_home` picks without `BURROW_HOME`:
/// `$XDG_DATA_HOME/burrow`, else `$HOME/.local/share/burrow`.
pub(super) fn default_home(env: &BTreeMap<String, String>) -> Result<PathBuf, ConfigError> {
    let nonempty = |name: &str| env.get(name).filter(|v| !v.is_empty());
    let path = if let Some(xdg) = nonempty("XDG_DATA_HOME") {
        PathBuf::from(xdg).join("burrow")
    } else if let Some(home) = nonempty("HOME") {
        PathBuf::from(home).join(".local/share/burrow")
    } else {
        return Err(invalid(
            &Origin::Default,
            HOME,
            "neither BURROW_HOME, XDG_DATA_HOME nor HOME is set; set `home` or BURROW_HOME".into(),
        ));
    };
    absolute(path, &Origin::Default, HOME)
}

/// `sqlite://<home>/serve.db?mode=rwc` (created if missing).
pub(super) fn default_database(home: &Path) -> Result<DatabaseUrl, ConfigError> {
    let path = home.join("serve.db");
    let Some(path) = path.to_str() else {
        return Err(invalid(
            &Origin::Default,
            DATABASE,
            format!(
                "{} is not valid UTF-8 and cannot be a database URL; set `database`",
                path.display()
            ),
        ));
    };
    // The SQLite URL parser percent-decodes the path and splits at `?`.
    let encoded = path
        .replace('%', "%25")
        .replace('?', "%3F")
        .replace('#', "%23");
    Ok(DatabaseUrl::Sqlite(format!("sqlite://{encoded}?mode=rwc")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_database_escapes_the_path() {
        let db = default_database(Path::new("/a?b#c%d")).unwrap();
        assert_eq!(db.as_str(), "sqlite:///a%3Fb%23c%25d/serve.db?mode=rwc");
        assert!(parse_database(&Raw::Env(db.as_str())).is_ok());
    }

    #[test]
    fn durations() {
        // Text is read by burrow::parse_duration (its own tests have the
        // whole grammar), bounded to 365 days, from the file or the
        // environment alike.
        let ok: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("30", Duration::from_secs(30)),
            ("1.5", Duration::from_millis(1500)),
            ("250ms", Duration::from_millis(250)),
            ("1.5s", Duration::from_millis(1500)),
            ("10m", Duration::from_secs(600)),
            ("1h30m", Duration::from_secs(5400)),
            (" 5s ", Duration::from_secs(5)),
            ("1d", Duration::from_secs(24 * 3600)),
            ("365d", Duration::from_secs(365 * 24 * 3600)),
            ("8760h", Duration::from_secs(365 * 24 * 3600)),
        ];
        for (s, want) in ok {
            let v = toml::Value::String((*s).into());
            for raw in [Raw::Env(s), Raw::Toml(&v)] {
                assert_eq!(parse_duration_raw(&raw), Ok(*want), "{raw:?}");
            }
        }
        for bad in [
            "",
            "s",
            "-1s",
            "5 s",
            "1h 30m",
            "5sec",
            "10x",
            "1h30",
            "nan",
            "8761h",
            "365d1ms",
            "366d",
            "99999999999999999999",
            "18446744073709551615h",
        ] {
            let v = toml::Value::String(bad.into());
            for raw in [Raw::Env(bad), Raw::Toml(&v)] {
                assert!(parse_duration_raw(&raw).is_err(), "{raw:?} parsed");
            }
        }
        let too_long = parse_duration_raw(&Raw::Env("366d")).unwrap_err();
        assert_eq!(too_long, "`366d` is too large; at most 365 days");
        let unit = parse_duration_raw(&Raw::Env("5x")).unwrap_err();
        assert!(unit.contains("unknown unit `x`"), "{unit}");

        for d in [
            Duration::ZERO,
            Duration::from_millis(250),
            Duration::from_secs(5400),
            Duration::from_millis(90_500),
        ] {
            assert_eq!(burrow::parse_duration(&format_duration(d)), Ok(d));
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        // TOML integers are seconds; negative ones, and floats, are rejected.
        let v = toml::Value::Integer(90);
        assert_eq!(
            parse_duration_raw(&Raw::Toml(&v)),
            Ok(Duration::from_secs(90))
        );
        for v in [
            toml::Value::Integer(-1),
            toml::Value::Integer(366 * 24 * 3600),
            toml::Value::Float(1.5),
        ] {
            assert!(parse_duration_raw(&Raw::Toml(&v)).is_err(), "{v:?}");
        }
    }
}
