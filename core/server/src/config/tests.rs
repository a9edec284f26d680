//! Loading as a whole: defaults, the file, the environment over it, and
//! the errors, each naming the key and where the value came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::resolve::Raw;
use super::values::{parse_database, replica_char};
use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    map.entry("HOME".into()).or_insert_with(|| "/home/u".into());
    map
}

fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn load_file(text: &str, pairs: &[(&str, &str)]) -> (Result<ServeConfig, ConfigError>, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, text);
    (ServeConfig::load(Some(&path), &env(pairs)), path)
}

fn assert_invalid(result: Result<ServeConfig, ConfigError>, want_key: &str, want_origin: Origin) {
    match result {
        Err(ConfigError::Invalid { origin, key, .. }) => {
            assert_eq!(key, want_key);
            assert_eq!(origin, want_origin);
        }
        other => panic!("expected Invalid for {want_key}, got {other:?}"),
    }
}

fn file_origin(path: &Path) -> Origin {
    Origin::File(path.to_path_buf())
}

fn env_origin(name: &str) -> Origin {
    Origin::Env(name.into())
}

#[test]
fn defaults() {
    let c = ServeConfig::load(None, &env(&[])).unwrap();
    assert_eq!(c.file, None);
    assert_eq!(
        c.listen,
        vec![Listen::Tcp("127.0.0.1:7878".parse().unwrap())]
    );
    assert!(!c.allow_public);
    assert!(!c.reuse_port);
    assert_eq!(c.home, PathBuf::from("/home/u/.local/share/burrow"));
    assert_eq!(
        c.database,
        DatabaseUrl::Sqlite("sqlite:///home/u/.local/share/burrow/serve.db?mode=rwc".into())
    );
    assert_eq!(c.backend, BackendKind::Local);
    let pid = std::process::id().to_string();
    assert!(
        c.replica_id.ends_with(&format!("-{pid}")),
        "{}",
        c.replica_id
    );
    assert!(c.replica_id.len() <= 64 && c.replica_id.chars().all(replica_char));
    assert_eq!(
        c.database_pool,
        PoolConfig {
            max_connections: 10,
            acquire_timeout: Duration::from_secs(5)
        }
    );
    assert!(c.auth.required);
    assert_eq!(
        c.gateway,
        GatewayConfig {
            startup_timeout: Duration::from_secs(60),
            retry_after: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            mcp_session_ttl: Duration::from_secs(24 * 3600),
            listen: Vec::new(),
            domain: None,
        }
    );
    assert_eq!(c.reaper.idle_timeout, Some(Duration::from_secs(900)));
    assert!(c.reaper.enabled());
    assert_eq!(c.reaper.sweep_interval, Duration::from_secs(30));
    assert_eq!(c.log.format, LogFormat::Text);
    // The default database URL parses.
    let default_db = c.database.as_str().to_owned();
    assert!(parse_database(&Raw::Env(&default_db)).is_ok());
}

#[test]
fn default_home_follows_the_library() {
    let c = ServeConfig::load(None, &env(&[("XDG_DATA_HOME", "/xdg")])).unwrap();
    assert_eq!(c.home, PathBuf::from("/xdg/burrow"));
    let c = ServeConfig::load(
        None,
        &env(&[("BURROW_HOME", "/bh"), ("XDG_DATA_HOME", "/xdg")]),
    )
    .unwrap();
    assert_eq!(c.home, PathBuf::from("/bh"));
    assert_eq!(c.database.as_str(), "sqlite:///bh/serve.db?mode=rwc");
    // An empty BURROW_HOME is ignored, as the library does.
    let c = ServeConfig::load(None, &env(&[("BURROW_HOME", "")])).unwrap();
    assert_eq!(c.home, PathBuf::from("/home/u/.local/share/burrow"));
    // A relative BURROW_HOME is taken from the current directory.
    let c = ServeConfig::load(None, &env(&[("BURROW_HOME", "rel")])).unwrap();
    assert_eq!(c.home, std::env::current_dir().unwrap().join("rel"));
    // No home at all is an error, not a guess.
    let r = ServeConfig::load(None, &BTreeMap::new());
    assert_invalid(r, "home", Origin::Default);
}

const FULL: &str = r#"
    listen = ["0.0.0.0:8080", "unix:/run/burrow/serve.sock", "[::1]:9000"]
    allow_public = true
    reuse_port = true
    database = "postgres://burrow:secret@db.internal:5432/burrow"
    home = "/var/lib/burrow"
    backend = "local"
    replica_id = "replica-a"

    [database_pool]
    max_connections = 50
    acquire_timeout = "2s"

    [auth]
    required = true

    [gateway]
    startup_timeout = 120
    retry_after = "2s"
    lease_ttl = "1m"
    heartbeat_interval = "15s"
    mcp_session_ttl = "2h"

    [reaper]
    idle_timeout = "1h30m"
    sweep_interval = "250ms"

    [log]
    format = "json"
"#;

#[test]
fn file_parsing() {
    let (c, path) = load_file(FULL, &[]);
    let c = c.unwrap();
    assert_eq!(c.file, Some(path));
    assert_eq!(
        c.listen,
        vec![
            Listen::Tcp("0.0.0.0:8080".parse().unwrap()),
            Listen::Unix("/run/burrow/serve.sock".into()),
            Listen::Tcp("[::1]:9000".parse().unwrap()),
        ]
    );
    assert!(c.allow_public);
    assert!(c.reuse_port);
    assert_eq!(
        c.database,
        DatabaseUrl::Postgres("postgres://burrow:secret@db.internal:5432/burrow".into())
    );
    assert_eq!(c.home, PathBuf::from("/var/lib/burrow"));
    assert_eq!(c.replica_id, "replica-a");
    assert_eq!(c.database_pool.max_connections, 50);
    assert_eq!(c.database_pool.acquire_timeout, Duration::from_secs(2));
    assert!(c.auth.required);
    assert_eq!(c.gateway.startup_timeout, Duration::from_secs(120));
    assert_eq!(c.gateway.retry_after, Duration::from_secs(2));
    assert_eq!(c.gateway.lease_ttl, Duration::from_secs(60));
    assert_eq!(c.gateway.mcp_session_ttl, Duration::from_secs(2 * 3600));
    assert_eq!(c.gateway.heartbeat_interval, Duration::from_secs(15));
    assert_eq!(c.reaper.idle_timeout, Some(Duration::from_secs(5400)));
    assert_eq!(c.reaper.sweep_interval, Duration::from_millis(250));
    assert_eq!(c.log.format, LogFormat::Json);
    assert!(c.requires_token(&c.listen[0]));

    let text = c.describe();
    assert!(text.contains("0.0.0.0:8080"), "{text}");
    assert!(text.contains("unix:/run/burrow/serve.sock"), "{text}");
    assert!(text.contains("replica-a"), "{text}");
    assert!(!text.contains("secret"), "{text}");
    assert!(text.contains("1h30m"), "{text}");
    // The config's Debug does not leak the password either.
    assert!(!format!("{c:?}").contains("secret"));
}

#[test]
fn empty_file_gives_defaults() {
    let (c, path) = load_file("", &[]);
    let mut c = c.unwrap();
    assert_eq!(c.file.take(), Some(path));
    let mut d = ServeConfig::load(None, &env(&[])).unwrap();
    d.replica_id.clone_from(&c.replica_id);
    assert_eq!(c, d);
}

#[test]
fn env_overrides_file() {
    let (c, _) = load_file(
        FULL,
        &[
            ("BURROW_SERVE_LISTEN", "127.0.0.1:1, unix:/tmp/s.sock"),
            ("BURROW_SERVE_ALLOW_PUBLIC", "0"),
            ("BURROW_SERVE_DATABASE", "sqlite::memory:"),
            ("BURROW_HOME", "/env/home"),
            ("BURROW_SERVE_BACKEND", "local"),
            ("BURROW_SERVE_REPLICA_ID", "r.2_x"),
            ("BURROW_SERVE_MAX_CONNECTIONS", "7"),
            ("BURROW_SERVE_ACQUIRE_TIMEOUT", "3"),
            ("BURROW_SERVE_AUTH_REQUIRED", "true"),
            ("BURROW_SERVE_STARTUP_TIMEOUT", "5m"),
            ("BURROW_SERVE_RETRY_AFTER", "3s"),
            ("BURROW_SERVE_LEASE_TTL", "10s"),
            ("BURROW_SERVE_HEARTBEAT_INTERVAL", "2s"),
            ("BURROW_SERVE_IDLE_TIMEOUT", "0"),
            ("BURROW_SERVE_SWEEP_INTERVAL", "1s"),
            ("BURROW_SERVE_LOG_FORMAT", "text"),
        ],
    );
    let c = c.unwrap();
    assert_eq!(
        c.listen,
        vec![
            Listen::Tcp("127.0.0.1:1".parse().unwrap()),
            Listen::Unix("/tmp/s.sock".into())
        ]
    );
    assert!(!c.allow_public);
    assert_eq!(c.database, DatabaseUrl::Sqlite("sqlite::memory:".into()));
    assert_eq!(c.home, PathBuf::from("/env/home"));
    assert_eq!(c.replica_id, "r.2_x");
    assert_eq!(c.database_pool.max_connections, 7);
    assert_eq!(c.database_pool.acquire_timeout, Duration::from_secs(3));
    assert!(c.auth.required);
    assert!(c.requires_token(&c.listen[0]));
    assert!(!c.requires_token(&c.listen[1]));
    assert_eq!(c.gateway.startup_timeout, Duration::from_secs(300));
    assert_eq!(c.gateway.retry_after, Duration::from_secs(3));
    assert_eq!(c.gateway.lease_ttl, Duration::from_secs(10));
    assert_eq!(c.gateway.heartbeat_interval, Duration::from_secs(2));
    assert_eq!(c.reaper.idle_timeout, None);
    assert!(!c.reaper.enabled());
    assert_eq!(c.reaper.sweep_interval, Duration::from_secs(1));
    assert_eq!(c.log.format, LogFormat::Text);
    assert!(c.describe().contains("disabled"));
}

#[test]
fn config_file_from_env_and_explicit_file_wins() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "replica_id = \"from-env-file\"");
    let e = env(&[("BURROW_SERVE_CONFIG", path.to_str().unwrap())]);
    let c = ServeConfig::load(None, &e).unwrap();
    assert_eq!(c.replica_id, "from-env-file");
    assert_eq!(c.file, Some(path.clone()));

    let other = dir.path().join("other.toml");
    std::fs::write(&other, "replica_id = \"explicit\"").unwrap();
    let c = ServeConfig::load(Some(&other), &e).unwrap();
    assert_eq!(c.replica_id, "explicit");

    let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_CONFIG", "")]));
    assert!(matches!(r, Err(ConfigError::Invalid { .. })), "{r:?}");
}

#[test]
fn unknown_keys() {
    let (r, path) = load_file("[reaper]\nidle_timout = \"5m\"\n", &[]);
    match r {
        Err(ConfigError::UnknownKey {
            path: p,
            key,
            suggestion,
        }) => {
            assert_eq!(p, path);
            assert_eq!(key, "reaper.idle_timout");
            assert_eq!(suggestion.as_deref(), Some("reaper.idle_timeout"));
        }
        other => panic!("{other:?}"),
    }
    let (r, _) = load_file("lisen = [\"127.0.0.1:1\"]\n", &[]);
    assert!(
        matches!(&r, Err(ConfigError::UnknownKey { key, suggestion, .. })
            if key == "lisen" && suggestion.as_deref() == Some("listen")),
        "{r:?}"
    );
    // A known key in the wrong table.
    let (r, _) = load_file("[gateway]\nidle_timeout = 5\n", &[]);
    assert!(
        matches!(&r, Err(ConfigError::UnknownKey { key, suggestion, .. })
            if key == "gateway.idle_timeout"
                && suggestion.as_deref() == Some("reaper.idle_timeout")),
        "{r:?}"
    );
    // A table's key at the top level, and an unknown table.
    let (r, _) = load_file("lease_ttl = 5\n", &[]);
    assert!(matches!(&r, Err(ConfigError::UnknownKey { key, .. }) if key == "lease_ttl"));
    let (r, _) = load_file("[metrics]\nport = 1\n", &[]);
    assert!(matches!(&r, Err(ConfigError::UnknownKey { key, .. }) if key == "metrics"));
    // A table written as a value.
    let (r, path) = load_file("reaper = 5\n", &[]);
    assert_invalid(r, "reaper", file_origin(&path));
}

#[test]
fn unknown_env() {
    let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_IDLE_TIMOUT", "5m")]));
    match r {
        Err(ConfigError::UnknownEnv { name, suggestion }) => {
            assert_eq!(
                name,
                "BURROW_SERVE_IDLE_TIMOUT".replace("TIMEOUT", "TIMOUT")
            );
            assert_eq!(suggestion.as_deref(), Some("BURROW_SERVE_IDLE_TIMEOUT"));
        }
        other => panic!("{other:?}"),
    }
    // Other variables, including other BURROW_ ones, are not ours to judge.
    assert!(ServeConfig::load(None, &env(&[("BURROW_LOG", "x"), ("PATH", "/bin")])).is_ok());
}

#[test]
fn read_and_parse_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let r = ServeConfig::load(Some(&missing), &env(&[]));
    assert!(
        matches!(&r, Err(ConfigError::Read { path, .. }) if *path == missing),
        "{r:?}"
    );

    let (r, path) = load_file("listen = [\n", &[]);
    match r {
        Err(ConfigError::Parse { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(!reason.contains('\n'), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_backend() {
    let (r, path) = load_file("backend = \"nomad\"\n", &[]);
    match r {
        Err(ConfigError::UnknownBackend { origin, value }) => {
            assert_eq!(origin, file_origin(&path));
            assert_eq!(value, "nomad");
        }
        other => panic!("{other:?}"),
    }
    let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_BACKEND", "remote")]));
    assert!(
        matches!(&r, Err(ConfigError::UnknownBackend { origin, value })
            if *origin == env_origin("BURROW_SERVE_BACKEND") && value == "remote"),
        "{r:?}"
    );
    let (r, path) = load_file("backend = 1\n", &[]);
    assert_invalid(r, "backend", file_origin(&path));
}

#[test]
fn kubernetes_settings() {
    let (r, _) = load_file(
        "backend = \"kubernetes\"\n[kubernetes]\nkubeconfig = \"/etc/k/config\"\n\
         namespace = \"sandboxes\"\nruntime_class = \"kata\"\nimage_pull_policy = \"Never\"\n",
        &[("BURROW_KUBE_CONTEXT", "ci")],
    );
    let c = r.unwrap();
    assert_eq!(c.backend, BackendKind::Kubernetes);
    assert_eq!(
        c.kubernetes.kubeconfig.as_deref(),
        Some(Path::new("/etc/k/config"))
    );
    assert_eq!(c.kubernetes.context.as_deref(), Some("ci"));
    assert_eq!(c.kubernetes.namespace, "sandboxes");
    assert_eq!(c.kubernetes.runtime_class.as_deref(), Some("kata"));
    assert_eq!(c.kubernetes.image_pull_policy, "Never");
    // The environment beats the file.
    let (r, _) = load_file(
        "[kubernetes]\nnamespace = \"a\"\n",
        &[("BURROW_KUBE_NAMESPACE", "b")],
    );
    assert_eq!(r.unwrap().kubernetes.namespace, "b");
    // Bad values name their key and origin.
    let (r, path) = load_file("[kubernetes]\nimage_pull_policy = \"Sometimes\"\n", &[]);
    assert_invalid(r, "kubernetes.image_pull_policy", file_origin(&path));
    let (r, path) = load_file("[kubernetes]\nnamespace = \"Bad_NS\"\n", &[]);
    assert_invalid(r, "kubernetes.namespace", file_origin(&path));
    // A relative kubeconfig is taken from the current directory.
    let (r, _) = load_file("[kubernetes]\nkubeconfig = \"relative/config\"\n", &[]);
    assert!(r.unwrap().kubernetes.kubeconfig.unwrap().is_absolute());
    let (r, _) = load_file("[kubernetes]\nnamspace = \"x\"\n", &[]);
    assert!(matches!(r, Err(ConfigError::UnknownKey { .. })), "{r:?}");
}

#[test]
fn listen_validation() {
    // Public addresses need allow_public, from either source.
    let (r, path) = load_file("listen = [\"0.0.0.0:80\"]\n", &[]);
    assert_invalid(r, "listen", file_origin(&path));
    let e = env(&[("BURROW_SERVE_LISTEN", "10.0.0.1:80")]);
    assert_invalid(
        ServeConfig::load(None, &e),
        "listen",
        env_origin("BURROW_SERVE_LISTEN"),
    );
    let (r, _) = load_file(
        "listen = [\"0.0.0.0:80\"]\n",
        &[("BURROW_SERVE_ALLOW_PUBLIC", "true")],
    );
    assert!(r.is_ok(), "{r:?}");
    // The environment can take allow_public back.
    let (r, path) = load_file(
        "allow_public = true\nlisten = [\"0.0.0.0:80\"]\n",
        &[("BURROW_SERVE_ALLOW_PUBLIC", "false")],
    );
    assert_invalid(r, "listen", file_origin(&path));
    // A server without authentication is for one machine only.
    let (r, path) = load_file("allow_public = true\n[auth]\nrequired = false\n", &[]);
    assert_invalid(r, "auth.required", file_origin(&path));
    let e = env(&[
        ("BURROW_SERVE_ALLOW_PUBLIC", "true"),
        ("BURROW_SERVE_AUTH_REQUIRED", "false"),
    ]);
    assert_invalid(
        ServeConfig::load(None, &e),
        "auth.required",
        env_origin("BURROW_SERVE_AUTH_REQUIRED"),
    );
    let (r, _) = load_file("[auth]\nrequired = false\n", &[]);
    assert!(r.is_ok_and(|c| !c.auth.required));
    // IPv4-mapped loopback is loopback.
    let e = env(&[("BURROW_SERVE_LISTEN", "[::ffff:127.0.0.1]:80")]);
    assert!(ServeConfig::load(None, &e).is_ok());

    for bad in [
        "",
        "localhost:7878",
        "127.0.0.1",
        "unix:relative.sock",
        "127.0.0.1:1,127.0.0.1:1",
        "127.0.0.1:1,,127.0.0.1:2",
    ] {
        let e = env(&[("BURROW_SERVE_LISTEN", bad)]);
        assert_invalid(
            ServeConfig::load(None, &e),
            "listen",
            env_origin("BURROW_SERVE_LISTEN"),
        );
    }
    let long = format!("unix:/{}", "x".repeat(200));
    let e = env(&[("BURROW_SERVE_LISTEN", long.as_str())]);
    assert!(matches!(
        ServeConfig::load(None, &e),
        Err(ConfigError::Invalid { .. })
    ));
    for bad in ["listen = []", "listen = \"127.0.0.1:1\"", "listen = [1]"] {
        let (r, path) = load_file(bad, &[]);
        assert_invalid(r, "listen", file_origin(&path));
    }
}

#[test]
fn database_validation() {
    for good in [
        "sqlite:serve.db",
        "sqlite:///tmp/x.db?mode=rwc",
        "sqlite::memory:",
        "postgres://u:p@h/db",
        "postgresql://u@h:5433/db?sslmode=require",
    ] {
        let e = env(&[("BURROW_SERVE_DATABASE", good)]);
        let c = ServeConfig::load(None, &e).unwrap();
        assert_eq!(c.database.as_str(), good);
        assert_eq!(c.database.is_postgres(), good.starts_with("postgres"));
    }
    for bad in [
        "mysql://u:hunter2@h/db",
        "/var/lib/burrow/serve.db",
        "",
        "sqlite:///x.db?mode=bogus",
        "postgres://u@h:notaport/db",
    ] {
        let e = env(&[("BURROW_SERVE_DATABASE", bad)]);
        let r = ServeConfig::load(None, &e);
        if let Err(err) = &r {
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
        assert_invalid(r, "database", env_origin("BURROW_SERVE_DATABASE"));
    }
}

#[test]
fn value_validation() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "BURROW_SERVE_MAX_CONNECTIONS",
            "0",
            "database_pool.max_connections",
        ),
        (
            "BURROW_SERVE_MAX_CONNECTIONS",
            "1001",
            "database_pool.max_connections",
        ),
        (
            "BURROW_SERVE_MAX_CONNECTIONS",
            "ten",
            "database_pool.max_connections",
        ),
        (
            "BURROW_SERVE_ACQUIRE_TIMEOUT",
            "0",
            "database_pool.acquire_timeout",
        ),
        ("BURROW_SERVE_AUTH_REQUIRED", "yes", "auth.required"),
        ("BURROW_SERVE_ALLOW_PUBLIC", "", "allow_public"),
        (
            "BURROW_SERVE_STARTUP_TIMEOUT",
            "0s",
            "gateway.startup_timeout",
        ),
        ("BURROW_SERVE_RETRY_AFTER", "1500ms", "gateway.retry_after"),
        ("BURROW_SERVE_RETRY_AFTER", "1.5s", "gateway.retry_after"),
        ("BURROW_SERVE_RETRY_AFTER", "0", "gateway.retry_after"),
        ("BURROW_SERVE_LEASE_TTL", "999ms", "gateway.lease_ttl"),
        (
            "BURROW_SERVE_MCP_SESSION_TTL",
            "59s",
            "gateway.mcp_session_ttl",
        ),
        (
            "BURROW_SERVE_HEARTBEAT_INTERVAL",
            "30s",
            "gateway.heartbeat_interval",
        ),
        (
            "BURROW_SERVE_HEARTBEAT_INTERVAL",
            "0",
            "gateway.heartbeat_interval",
        ),
        ("BURROW_SERVE_IDLE_TIMEOUT", "soon", "reaper.idle_timeout"),
        ("BURROW_SERVE_SWEEP_INTERVAL", "0", "reaper.sweep_interval"),
        ("BURROW_SERVE_LOG_FORMAT", "xml", "log.format"),
        ("BURROW_SERVE_REPLICA_ID", "", "replica_id"),
        ("BURROW_SERVE_REPLICA_ID", "has space", "replica_id"),
        ("BURROW_SERVE_REPLICA_ID", "é", "replica_id"),
    ];
    for (name, value, key) in cases {
        let r = ServeConfig::load(None, &env(&[(name, value)]));
        assert_invalid(r, key, env_origin(name));
    }
    let long = "r".repeat(65);
    let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_REPLICA_ID", long.as_str())]));
    assert_invalid(r, "replica_id", env_origin("BURROW_SERVE_REPLICA_ID"));
    let ok = "r".repeat(64);
    assert!(ServeConfig::load(None, &env(&[("BURROW_SERVE_REPLICA_ID", ok.as_str())])).is_ok());

    // Wrong TOML types name the file and key.
    for (text, key) in [
        ("allow_public = \"true\"", "allow_public"),
        (
            "[database_pool]\nmax_connections = \"10\"",
            "database_pool.max_connections",
        ),
        ("[reaper]\nidle_timeout = -5", "reaper.idle_timeout"),
        ("[reaper]\nidle_timeout = 1.5", "reaper.idle_timeout"),
        ("home = \"relative/home\"", "home"),
        ("replica_id = 7", "replica_id"),
    ] {
        let (r, path) = load_file(text, &[]);
        assert_invalid(r, key, file_origin(&path));
    }
}

#[test]
fn heartbeat_must_be_shorter_than_lease_ttl() {
    // The default heartbeat follows the lease ttl.
    let c = ServeConfig::load(None, &env(&[("BURROW_SERVE_LEASE_TTL", "1s")])).unwrap();
    assert_eq!(
        c.gateway.heartbeat_interval,
        Duration::from_millis(333) + Duration::from_nanos(333_333)
    );
    // The environment lowering the ttl below the file's heartbeat is
    // reported on the heartbeat, where it came from.
    let (r, path) = load_file(
        "[gateway]\nheartbeat_interval = \"20s\"\n",
        &[("BURROW_SERVE_LEASE_TTL", "20s")],
    );
    assert_invalid(r, "gateway.heartbeat_interval", file_origin(&path));
}

#[test]
fn bad_file_value_is_an_error_even_when_env_overrides_it() {
    let (r, path) = load_file(
        "[gateway]\nlease_ttl = \"forever\"\n",
        &[("BURROW_SERVE_LEASE_TTL", "30s")],
    );
    assert_invalid(r, "gateway.lease_ttl", file_origin(&path));
    let (r, path) = load_file("home = \"rel\"\n", &[("BURROW_HOME", "/abs")]);
    assert_invalid(r, "home", file_origin(&path));
}

#[test]
fn messages_name_the_key_and_the_source() {
    let (r, path) = load_file("[gateway]\nlease_ttl = \"soon\"\n", &[]);
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("gateway.lease_ttl"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_LEASE_TTL", "soon")]));
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("BURROW_SERVE_LEASE_TTL"), "{msg}");
    let (r, path) = load_file("[reaper]\nidle_timout = 1\n", &[]);
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("reaper.idle_timout"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn tls_takes_both_files_or_neither() {
    let c = ServeConfig::load(None, &env(&[])).unwrap();
    assert_eq!(c.tls, None);
    assert!(c.describe().contains("plain HTTP"));

    // From the environment; a relative path is the current directory's.
    let c = ServeConfig::load(
        None,
        &env(&[
            ("BURROW_SERVE_TLS_CERT", "/etc/tls/tls.crt"),
            ("BURROW_SERVE_TLS_KEY", "tls.key"),
        ]),
    )
    .unwrap();
    let tls = c.tls.clone().unwrap();
    assert_eq!(tls.cert, PathBuf::from("/etc/tls/tls.crt"));
    assert_eq!(tls.key, std::env::current_dir().unwrap().join("tls.key"));
    let text = c.describe();
    assert!(text.contains("/etc/tls/tls.crt"), "{text}");
    assert!(text.contains("TLS"), "{text}");

    // From the file, overridden by the environment, overridden by flags.
    let file = "[tls]\ncert = \"/f/c.pem\"\nkey = \"/f/k.pem\"\n";
    let (c, _) = load_file(file, &[]);
    let tls = c.unwrap().tls.unwrap();
    assert_eq!(
        (tls.cert, tls.key),
        (PathBuf::from("/f/c.pem"), PathBuf::from("/f/k.pem"))
    );
    let (c, _) = load_file(file, &[("BURROW_SERVE_TLS_KEY", "/e/k.pem")]);
    assert_eq!(c.unwrap().tls.unwrap().key, PathBuf::from("/e/k.pem"));
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, file);
    let flags = Flags {
        tls_cert: Some("/flag/c.pem".into()),
        tls_key: None,
    };
    let c = ServeConfig::load_with_flags(
        Some(&path),
        &env(&[("BURROW_SERVE_TLS_CERT", "/e/c.pem")]),
        &flags,
    )
    .unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(
        (tls.cert, tls.key),
        (PathBuf::from("/flag/c.pem"), PathBuf::from("/f/k.pem"))
    );

    // One alone names the other as missing, and where the one came from.
    let r = ServeConfig::load_with_flags(None, &env(&[]), &flags);
    match r {
        Err(ConfigError::Missing {
            key, with, origin, ..
        }) => {
            assert_eq!((key.as_str(), with.as_str()), ("tls.key", "tls.cert"));
            assert_eq!(origin, Origin::Flag("--tls-cert".into()));
        }
        other => panic!("{other:?}"),
    }
    let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_TLS_KEY", "/k.pem")]));
    match r {
        Err(ConfigError::Missing { key, origin, .. }) => {
            assert_eq!(key, "tls.cert");
            assert_eq!(origin, env_origin("BURROW_SERVE_TLS_KEY"));
        }
        other => panic!("{other:?}"),
    }
    let (r, path) = load_file("[tls]\ncert = \"/c.pem\"\n", &[]);
    assert!(
        matches!(&r, Err(ConfigError::Missing { key, origin, .. })
            if key == "tls.key" && *origin == file_origin(&path)),
        "{r:?}"
    );

    // Empty or not a string: invalid, naming the key.
    let r = ServeConfig::load(
        None,
        &env(&[
            ("BURROW_SERVE_TLS_CERT", ""),
            ("BURROW_SERVE_TLS_KEY", "/k.pem"),
        ]),
    );
    assert_invalid(r, "tls.cert", env_origin("BURROW_SERVE_TLS_CERT"));
    let (r, path) = load_file("[tls]\ncert = \"/c.pem\"\nkey = 5\n", &[]);
    assert_invalid(r, "tls.key", file_origin(&path));
    let (r, _) = load_file("[tls]\ncrt = \"/c.pem\"\n", &[]);
    assert!(
        matches!(&r, Err(ConfigError::UnknownKey { suggestion, .. })
            if suggestion.as_deref() == Some("tls.cert")),
        "{r:?}"
    );
}
