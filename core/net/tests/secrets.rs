//! Secrets through the stack against real kernels and real TLS on both
//! ends: a guest (python's http over sockets and its ssl module, trusting
//! only the sandbox's CA) and far HTTP/HTTPS servers that keep each head
//! they got and echo it back, the way a reflecting service would (see
//! `lab`): the far end gets the value in the header, the guest gets the
//! echo with the value masked. Each test runs in a lab of its own.

#![allow(clippy::unwrap_used)]

mod lab;

use std::sync::Arc;

use burrow_net::secrets::http::Place;
use burrow_net::secrets::tls::{generate_authority, host_roots, AuthorityPem, Interceptor};
use burrow_net::secrets::{placeholder_from, Secret, SecretHost, Secrets};
use burrow_net::stack::Target;
use burrow_net::Why;
use lab::far_http::{far_ca, heads};
use lab::{policy, Lab};

const VALUE: &str = "ghp_TheRealValue42";

fn placeholder() -> String {
    placeholder_from([0x5a; 16])
}

/// The lab's secret GH (for `a.test` and `x.c.test`), the sandbox's CA,
/// and where its certificate is for the guest.
fn secrets() -> (Arc<Secrets>, AuthorityPem, String) {
    let ca = generate_authority("lab").unwrap();
    let roots = host_roots(&[far_ca().cert_pem.clone().into_bytes()]);
    let tls = Interceptor::new("lab", &ca, roots).unwrap();
    let list = vec![Secret {
        name: "GH".into(),
        placeholder: placeholder(),
        value: VALUE.into(),
        hosts: vec![
            SecretHost::parse("a.test").unwrap(),
            SecretHost::parse("x.c.test").unwrap(),
        ],
        headers: Vec::new(),
    }];
    // Unique, not per pid alone: a pid comes round again in a long run,
    // and an earlier run's directory (another user's, rootless) is not
    // writable here.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("burrow-net-lab-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("sandbox-ca.pem");
    std::fs::write(&ca_file, &ca.cert).unwrap();
    let far_file = dir.join("far-ca.pem");
    std::fs::write(&far_file, &far_ca().cert_pem).unwrap();
    let secrets = Arc::new(Secrets::new(list, Some(tls)));
    (secrets, ca, dir.display().to_string())
}

fn lab() -> (Lab, String) {
    let (secrets, _, dir) = secrets();
    let lab = Lab::with_secrets(
        policy(&["a.test", "b.test", "x.c.test"], &[]),
        Some(secrets),
    );
    (lab, dir)
}

#[tokio::test]
async fn a_plain_request_to_its_host_gets_the_value_and_elsewhere_is_refused() {
    if !lab::inside("a_plain_request_to_its_host_gets_the_value_and_elsewhere_is_refused") {
        return;
    }
    let (lab, _) = lab();
    let ph = placeholder();
    let echoed = lab.guest(&["http", "a.test", "8080", &ph]).await;
    // The echo of the head, the value masked in it.
    assert!(
        echoed.starts_with(&format!(
            "GET /echo HTTP/1.1|Host: a.test|Authorization: Bearer {}|",
            "*".repeat(VALUE.len())
        )),
        "{echoed}"
    );
    assert!(!echoed.contains(VALUE) && !echoed.contains(&ph));
    let far = heads("198.18.0.2:8080");
    assert_eq!(far.len(), 1);
    assert!(
        far[0].contains(&format!("Authorization: Bearer {VALUE}\r\n"))
            && far[0].contains("Accept-Encoding: identity\r\n")
            && !far[0].contains(&ph),
        "{}",
        far[0]
    );

    // In the request line, even to its host: refused, nothing sent.
    let refused = lab
        .guest(&["http", "a.test", "8080", &ph, "/x?t={t}"])
        .await;
    assert!(refused.starts_with("ERR") || refused == "EOF", "{refused}");
    assert_eq!(heads("198.18.0.2:8080").len(), 1);
    let r = lab.refusals();
    assert!(
        matches!(&r.last().unwrap().target, Target::Secret(s) if s.place == Place::RequestLine),
        "{r:?}"
    );
    assert!(r
        .last()
        .unwrap()
        .to_string()
        .contains("in the request line to a.test"));

    // b.test is allowed by the policy, but the secret is not for it.
    let refused = lab.guest(&["http", "b.test", "8080", &ph]).await;
    assert!(refused.starts_with("ERR") || refused == "EOF", "{refused}");
    assert!(
        heads("198.18.0.3:8080").iter().all(|h| !h.contains(&ph)),
        "the placeholder never reached b.test"
    );
    let r = lab.refusals();
    let last = r.last().unwrap();
    assert!(matches!(
        &last.target,
        Target::Secret(s) if s.name == "GH" && s.host.as_deref() == Some("b.test") && s.dst.to_string() == "198.18.0.3:8080"
    ));
    assert_eq!(
        last.verdict.why,
        Why::SecretHosts("a.test, x.c.test".into())
    );
    assert!(last.to_string().contains("GH"));
    assert_eq!(lab.counters.read().refusals, 2);

    // Without a placeholder, b.test is an ordinary allowed host.
    let plain = lab.guest(&["http", "b.test", "8080", "nothing"]).await;
    assert!(
        plain.starts_with("GET /echo HTTP/1.1|Host: b.test|"),
        "{plain}"
    );
}

#[tokio::test]
async fn https_to_its_host_is_intercepted_with_the_sandbox_ca_and_others_pass_untouched() {
    if !lab::inside(
        "https_to_its_host_is_intercepted_with_the_sandbox_ca_and_others_pass_untouched",
    ) {
        return;
    }
    let (lab, dir) = lab();
    let ph = placeholder();
    let sandbox_ca = format!("{dir}/sandbox-ca.pem");
    let far_ca_file = format!("{dir}/far-ca.pem");
    // x.c.test: the guest trusts only the sandbox's CA, and the far end
    // gets the value.
    let echoed = lab
        .guest(&["https", "x.c.test", "443", "x.c.test", &sandbox_ca, &ph])
        .await;
    assert!(
        echoed.contains(&format!(
            "Authorization: Bearer {}|",
            "*".repeat(VALUE.len())
        )),
        "{echoed}"
    );
    assert!(!echoed.contains(VALUE));
    let far = heads("198.18.0.3:443");
    assert_eq!(far.len(), 1);
    assert!(far[0].contains(VALUE) && !far[0].contains(&ph));

    // The TLS name is x.c.test, the Host b.test (served at the same far
    // end): refused before anything is sent there.
    let refused = lab
        .guest(&[
            "https",
            "x.c.test",
            "443",
            "x.c.test",
            &sandbox_ca,
            &ph,
            "/echo",
            "b.test",
        ])
        .await;
    assert!(!refused.contains(VALUE), "{refused}");
    assert_eq!(heads("198.18.0.3:443").len(), 1);
    let r = lab.refusals();
    assert!(
        matches!(&r.last().unwrap().target, Target::Secret(s)
            if s.host.as_deref() == Some("b.test") && s.place == Place::Misdirected("x.c.test".into())),
        "{r:?}"
    );

    // b.test is not a secret's host: its TLS is the far end's own (the
    // guest verifies it with the far CA; the sandbox's would fail).
    let echoed = lab
        .guest(&["https", "b.test", "443", "b.test", &far_ca_file, "nothing"])
        .await;
    assert!(
        echoed.contains("Authorization: Bearer nothing|"),
        "{echoed}"
    );
    let refused = lab
        .guest(&["https", "b.test", "443", "b.test", &sandbox_ca, "nothing"])
        .await;
    assert!(refused.starts_with("ERR ssl"), "{refused}");
}

#[tokio::test]
async fn a_far_end_that_cannot_prove_the_name_gets_nothing() {
    if !lab::inside("a_far_end_that_cannot_prove_the_name_gets_nothing") {
        return;
    }
    let (lab, dir) = lab();
    let ph = placeholder();
    // The guest asks for x.c.test at a.test's address, whose certificate
    // is for a.test only: the stack's own check of the far end fails, so
    // nothing is sent there.
    assert_eq!(lab.guest(&["dns", "a.test"]).await, "0 198.18.0.2");
    let out = lab
        .guest(&[
            "https",
            "198.18.0.2",
            "443",
            "x.c.test",
            &format!("{dir}/sandbox-ca.pem"),
            &ph,
        ])
        .await;
    assert!(out.starts_with("ERR"), "{out}");
    assert!(heads("198.18.0.2:443").is_empty());
    let r = lab.refusals();
    assert!(
        r.iter().any(|r| matches!(&r.target, Target::Tls { name, dst } if name == "x.c.test" && dst.to_string() == "198.18.0.2:443")
            && matches!(r.verdict.why, Why::Untrusted(_))),
        "{r:?}"
    );
}
