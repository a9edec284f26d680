//! A tenant's sandbox against the server's host (issue 56, class 2): under
//! `burrow serve`, an operator's create with an allow rule naming the
//! host's loopback (`tcp:127.0.0.1:PORT`), or a live change to one, reached
//! a loopback-only service of the host from inside the sandbox (through
//! its stack's host address, 10.0.2.2); private and link-local ranges were
//! accepted the same way.
//!
//! Now every tenant but the default one holds its sandboxes under the
//! egress ceiling: a rule naming such an address, in any spelling, is
//! refused (`invalid_config`) at create and at a live change; `all`,
//! wide rules and names that resolve there reach nothing of it; and the
//! stack itself refuses those addresses under the ceiling whatever the
//! rules say. What counts is what reached the host's listener. The
//! default tenant keeps its freedom (the probe's positive control).
//! Real `burrow serve`, real sandboxes (runc), a DNS server of the test.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use burrow::{Backend, Network, NetworkPolicy, SandboxHandle};
use burrow_cli_testkit as common;
use common::serve::{http, Resp, ServeEnv, Server};
use common::TestHome;
use serde_json::{json, Value};

/// A loopback service of the host (the API, a database bound to
/// 127.0.0.1): counts the connections that reach it.
pub(crate) struct HostService {
    pub(crate) port: u16,
    hits: Arc<AtomicUsize>,
}

impl HostService {
    pub(crate) fn start(answer: &'static [u8]) -> HostService {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let seen = hits.clone();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                seen.fetch_add(1, Ordering::SeqCst);
                let mut c = c;
                let _ = std::io::Write::write_all(&mut c, answer);
            }
        });
        HostService { port, hits }
    }

    pub(crate) fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A `burrow serve` on SQLite whose stacks (and outbound calls) ask the
/// test's DNS server: the tenant `t1` with a token of `role`, and the
/// default tenant's admin.
pub(crate) struct Served {
    pub(crate) server: Server,
    pub(crate) tenant: String,
    pub(crate) admin: String,
    _env: ServeEnv,
    _home: TestHome,
}

impl Served {
    pub(crate) async fn start(dns: SocketAddr, role: &str, vars: &[(&str, &str)]) -> Served {
        let home = TestHome::new().await;
        home.name_image("busybox");
        let sqlite = format!("sqlite://{}/serve.db", home.path().display());
        let mut env = ServeEnv::new(home.path(), &sqlite).set("IDLE_TIMEOUT", "0");
        for (k, v) in vars {
            env = env.set(k, v);
        }
        env.vars
            .push(("BURROW_DNS_SERVERS".into(), dns.to_string()));
        let role = role.to_owned();
        let (server, tenant, admin, env) = tokio::task::spawn_blocking(move || {
            env.create_tenant("t1");
            let tenant = env.create_token_in("t1-token", "t1", &role);
            let admin = env.create_token("root");
            (env.start("a"), tenant, admin, env)
        })
        .await
        .unwrap();
        Served {
            server,
            tenant,
            admin,
            _env: env,
            _home: home,
        }
    }

    /// `method path` with `token` and a JSON body.
    pub(crate) async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Resp {
        let url = format!("{}{path}", self.server.url);
        let (token, method) = (token.to_owned(), method.to_owned());
        tokio::task::spawn_blocking(move || {
            let body = body.map(|b| b.to_string());
            http(&method, &url, Some(&token), body.as_deref())
        })
        .await
        .unwrap()
    }

    /// The server as `token`'s client library sees it.
    pub(crate) fn remote(&self, token: &str) -> Arc<dyn Backend> {
        Arc::new(burrow::RemoteBackend::connect(&self.server.url, Some(token.to_owned())).unwrap())
    }
}

/// The zone of the test's DNS server: `gw.test` is the stack's host
/// address (the host's loopback seen from inside), `loop.test` the
/// loopback itself.
fn zone(name: &str) -> Option<std::net::Ipv4Addr> {
    match name {
        "gw.test" => Some([10, 0, 2, 2].into()),
        "loop.test" => Some([127, 0, 0, 1].into()),
        _ => None,
    }
}

/// From inside sandbox `id` (seen through `backend`), a TCP connection to
/// `host:port` (started first if it is not running).
async fn probe(backend: &Arc<dyn Backend>, id: &str, host: &str, port: u16) {
    let id: burrow::SandboxId = id.parse().unwrap();
    let h = SandboxHandle::get_by_id_in(backend.clone(), &id)
        .await
        .unwrap();
    let sb = h.connect_or_start().await.unwrap();
    let script = format!("nc -w 3 {host} {port} </dev/null; true");
    sb.exec(["sh", "-c", &script]).await.unwrap();
}

/// A create of sandbox `name` with `network`, by `token`.
async fn create(s: &Served, token: &str, name: &str, network: Value) -> Resp {
    let body = json!({
        "name": name,
        "detached": true,
        "config": {"image": "busybox", "command": ["sleep", "3600"], "network": network},
    });
    s.call(token, "POST", "/v1/sandboxes", Some(body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_rules_reach_no_host_address_in_any_spelling() {
    let host = HostService::start(b"host-only\n");
    let control = HostService::start(b"control\n");
    let dns = common::dns::start(zone);
    let s = Served::start(dns, "operator", &[]).await;
    let p = host.port;

    // The default tenant keeps today's freedom: its rule names the host's
    // loopback, and its sandbox reaches it (the probe works).
    let r = create(
        &s,
        &s.admin,
        "free",
        json!({"allow": [format!("tcp:127.0.0.1:{}", control.port)]}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let free = r.json()["id"].as_str().unwrap().to_owned();
    probe(&s.remote(&s.admin), &free, "10.0.2.2", control.port).await;
    assert_eq!(
        control.hits(),
        1,
        "the default tenant's probe did not arrive"
    );

    // A tenant's rules naming the host's loopback, private or link-local
    // addresses: refused as they come, in every spelling the rules take.
    let named = [
        format!("tcp:127.0.0.1:{p}"),
        "127.0.0.1".to_owned(),
        format!("127.0.0.0/8:{p}"),
        "127.0.0.0/9".to_owned(),
        "[::ffff:127.0.0.1]".to_owned(),
        "[::ffff:7f00:0/104]".to_owned(),
        "[::1]".to_owned(),
        "localhost".to_owned(),
        "*.localhost".to_owned(),
        "0x7f000001".to_owned(),
        "10.0.0.0/8".to_owned(),
        "169.254.169.254".to_owned(),
        "100.64.0.0/10".to_owned(),
        "172.16.0.0/12".to_owned(),
        "192.168.0.0/16".to_owned(),
    ];
    let rest = ["*.test".to_owned()];
    let mut accepted = Vec::new();
    for (i, rule) in named.iter().enumerate() {
        let r = create(
            &s,
            &s.tenant,
            &format!("n{i}"),
            json!({"allow": [rule, &rest[0]]}),
        )
        .await;
        if r.status == 201 {
            accepted.push(r.json()["id"].as_str().unwrap().to_owned());
        } else {
            assert_eq!(r.error_code(), "invalid_config", "{rule}: {}", r.text());
        }
    }
    // Spellings the rule grammar never reads as an address: refused too.
    for (i, rule) in [
        "2130706433",
        "127.1",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "127.0.0.1:0",
    ]
    .iter()
    .enumerate()
    {
        let r = create(&s, &s.tenant, &format!("g{i}"), json!({"allow": [rule]})).await;
        assert_eq!(r.error_code(), "invalid_config", "{rule}: {}", r.text());
    }
    // Whatever was taken, asked to reach the host: by its stack's host
    // address and by a name leading there.
    let tenant = s.remote(&s.tenant);
    for id in &accepted {
        probe(&tenant, id, "10.0.2.2", p).await;
        probe(&tenant, id, "gw.test", p).await;
    }
    // `all`, the widest rules, names: the host stays out of reach.
    for (i, network) in [
        json!("all"),
        json!({"allow": ["*", "0.0.0.0/0", "*.test"]}),
        json!({"allow": [format!("tcp:*:{p}"), "gw.test", "loop.test"]}),
    ]
    .into_iter()
    .enumerate()
    {
        let r = create(&s, &s.tenant, &format!("w{i}"), network).await;
        assert_eq!(r.status, 201, "{}", r.text());
        let id = r.json()["id"].as_str().unwrap().to_owned();
        probe(&tenant, &id, "10.0.2.2", p).await;
        probe(&tenant, &id, "gw.test", p).await;
    }
    assert_eq!(
        host.hits(),
        0,
        "a tenant's sandbox reached the host's loopback"
    );
    assert_eq!(accepted.len(), 0, "rules naming the host were taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_change_opens_no_host_address() {
    let host = HostService::start(b"host-only\n");
    let dns = common::dns::start(zone);
    let s = Served::start(dns, "operator", &[]).await;
    let p = host.port;
    let tenant = s.remote(&s.tenant);
    let sb = burrow::Sandbox::builder("live")
        .image("busybox")
        .backend(tenant.clone())
        .network(Network::All)
        .create()
        .await
        .unwrap();
    let id = sb.id().to_string();
    probe(&tenant, &id, "10.0.2.2", p).await;
    // Each change is tried live; whatever the server took, the sandbox
    // then tries the host again.
    let mut answers = Vec::new();
    for (i, allow) in [
        vec![format!("tcp:127.0.0.1:{p}")],
        vec!["127.0.0.0/8".to_owned(), "*.test".to_owned()],
        vec!["10.0.0.0/8".to_owned(), "*.test".to_owned()],
        vec!["[::ffff:127.0.0.1]".to_owned()],
        vec!["169.254.169.254".to_owned()],
    ]
    .into_iter()
    .enumerate()
    {
        let r = s
            .call(
                &s.tenant,
                "PATCH",
                &format!("/v1/sandboxes/{id}"),
                Some(json!({"network": {"allow": allow}})),
            )
            .await;
        answers.push((format!("change {i}"), r.error_code_or_none()));
        probe(&tenant, &id, "10.0.2.2", p).await;
        probe(&tenant, &id, "gw.test", p).await;
    }
    // Through the client library too: a typed refusal.
    let policy = NetworkPolicy::allow([format!("tcp:127.0.0.1:{p}")]).unwrap();
    let code = match sb.modify().network(policy).apply().await {
        Ok(_) => String::new(),
        Err(e) => e.code().to_string(),
    };
    answers.push(("the library's change".into(), code));
    probe(&tenant, &id, "10.0.2.2", p).await;
    // A change that names nothing of the host is taken, and holds.
    let r = s
        .call(
            &s.tenant,
            "PATCH",
            &format!("/v1/sandboxes/{id}"),
            Some(json!({"network": {"allow": ["*", "*.test"]}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    probe(&tenant, &id, "10.0.2.2", p).await;
    probe(&tenant, &id, "gw.test", p).await;
    assert_eq!(host.hits(), 0, "a live change opened the host's loopback");
    for (what, code) in answers {
        assert_eq!(code, "invalid_config", "{what}");
    }
}

/// The error code of an answer, empty when it is none (a success, or a
/// body that is no error envelope).
pub(crate) trait CodeOf {
    fn error_code_or_none(&self) -> String;
}

impl CodeOf for Resp {
    fn error_code_or_none(&self) -> String {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_holds_the_ceiling_whatever_the_rules_name() {
    // Below the server's checks: a configuration that carries the ceiling
    // and rules naming the host (as no tenant's create can), on the engine
    // itself. The stack refuses the host all the same.
    let host = HostService::start(b"host-only\n");
    let home = TestHome::new().await;
    let mut config = burrow::SandboxConfig::new(common::busybox_rootfs().display().to_string());
    config.network = NetworkPolicy::allow([
        format!("tcp:127.0.0.1:{}", host.port),
        "127.0.0.0/8".to_owned(),
        "10.0.0.0/8".to_owned(),
    ])
    .unwrap()
    .into();
    config.egress_ceiling = Some(burrow_net::Ceiling::default());
    let sb = home.builder("held").config(config).create().await.unwrap();
    let script = format!("nc -w 3 10.0.2.2 {} </dev/null; true", host.port);
    sb.exec(["sh", "-c", &script]).await.unwrap();
    assert_eq!(host.hits(), 0, "the stack let the host's loopback through");
    let refusals = sb.metrics().await.unwrap().network.unwrap().refusals;
    assert!(refusals >= 1, "no refusal counted");
    // Without the ceiling, such a rule reaches it (the probe works).
    let mut open = burrow::SandboxConfig::new(common::busybox_rootfs().display().to_string());
    open.network = NetworkPolicy::allow([format!("tcp:127.0.0.1:{}", host.port)])
        .unwrap()
        .into();
    let free = home.builder("free").config(open).create().await.unwrap();
    free.exec(["sh", "-c", &script]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(host.hits(), 1, "the control probe did not arrive");
}
