//! Writes the committed seed corpus, `seeds/<target>/<name>`, from real
//! encoders: protocol frames from `burrow_protocol::encode`, configurations
//! and modifications from their serde forms, manifests and indexes from
//! burrow's own layout writer, tar archives from `burrow_fuzz::tarball`,
//! and structured inputs from their DNA.
//!
//! From `fuzz/`: `cargo run --example make_seeds` (or give another output
//! directory). Regressions found by fuzzing are added here too, under a
//! `crash-` name, so that they stay in the corpus.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use burrow::image::ImageConfig;
use burrow::internal::image::oci::{LayerEntry, LayerSpec, LayoutWriter, Platform};
use burrow::{DriverKind, Modify, Mount, MountSource, OciRuntime, SandboxConfig};
use burrow_fuzz::dna::Encode;
use burrow_fuzz::layout::Image;
use burrow_fuzz::tarball::{Archive, Compression, Entry, Kind, Layer, Style, Tail, TarPath, Token};
use burrow_protocol::vm::{VmBoot, VmMount};
use burrow_protocol::{
    encode, encode_for, Bytes, Control, DirEntry, ExecRequest, ExitStatus, FileKind, FileStat, GuestError,
    GuestErrorCode, GuestMsg, HostMsg, Identity, Metrics, Request, Response, TtySize,
    MAX_FRAME_LEN, PROTOCOL_VERSION,
};

fn main() {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds"));
    protocol(&out.join("protocol"));
    config(&out.join("config"));
    text(&out.join("text"));
    net(&out.join("net"));
    oci_manifest(&out.join("oci_manifest"));
    unpack(&out.join("unpack"));
    println!("seeds written under {}", out.display());
}

fn write(dir: &Path, name: &str, data: &[u8]) {
    fs::create_dir_all(dir).expect("creating a seed directory");
    fs::write(dir.join(name), data).expect("writing a seed");
}

fn with_mode(mode: u8, data: &[u8]) -> Vec<u8> {
    let mut v = vec![mode];
    v.extend_from_slice(data);
    v
}

fn payload<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    encode(msg)[4..].to_vec()
}

fn identity() -> Identity {
    Identity {
        sandbox_id: "sbx_0123456789abcdef".into(),
        generation: 3,
    }
}

fn protocol(dir: &Path) {
    let exec = ExecRequest {
        argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
        env: BTreeMap::from([("A".into(), "1".into())]),
        cwd: Some("/tmp".into()),
        stdin: true,
        timeout_ms: Some(5000),
        tty: Some(TtySize { rows: 24, cols: 80 }),
    };
    let host: Vec<(&str, HostMsg)> = vec![
        (
            "hello",
            HostMsg::Hello {
                version: 1,
                expect: Some(identity()),
            },
        ),
        (
            "exec",
            HostMsg::Request {
                id: 1,
                body: Request::Exec(exec.clone()),
                window: Some(1 << 20),
            },
        ),
        (
            "write-file",
            HostMsg::Request {
                id: 2,
                body: Request::WriteFile {
                    path: "/tmp/f".into(),
                    mode: Some(0o600),
                    append: true,
                },
                window: None,
            },
        ),
        (
            "rename",
            HostMsg::Request {
                id: 3,
                body: Request::Rename {
                    from: "/a".into(),
                    to: "/b".into(),
                },
                window: None,
            },
        ),
        (
            "tunnel",
            HostMsg::Request {
                id: 4,
                body: Request::Tunnel { port: 8080 },
                window: None,
            },
        ),
        (
            "shutdown",
            HostMsg::Request {
                id: 5,
                body: Request::Shutdown { grace_ms: 100 },
                window: None,
            },
        ),
        (
            "stop",
            HostMsg::Control {
                id: 6,
                body: Control::Stop {
                    grace_ms: 1000,
                    owner_exited: true,
                },
            },
        ),
        (
            "metrics",
            HostMsg::Control {
                id: 7,
                body: Control::Metrics,
            },
        ),
        (
            "data",
            HostMsg::Data {
                id: 1,
                data: Bytes(b"hello\n".to_vec()),
            },
        ),
        ("signal", HostMsg::Signal { id: 1, signal: 15 }),
        (
            "resize",
            HostMsg::Resize {
                id: 1,
                size: TtySize {
                    rows: 50,
                    cols: 132,
                },
            },
        ),
        ("cancel", HostMsg::Cancel { id: 1 }),
        ("window", HostMsg::Window { id: 1, bytes: 1 << 19 }),
    ];
    for (name, msg) in &host {
        write(dir, &format!("host-{name}"), &with_mode(0, &payload(msg)));
    }
    let stat = FileStat {
        kind: FileKind::Symlink,
        size: 4,
        mode: 0o777,
        uid: 0,
        gid: 0,
        mtime: 1_700_000_000,
        link_target: Some("/etc".into()),
    };
    let guest: Vec<(&str, GuestMsg)> = vec![
        ("window", GuestMsg::Window { id: 1, bytes: 1 << 18 }),
        (
            "hello",
            GuestMsg::Hello {
                version: 1,
                agent_version: "0.1.0".into(),
                identity: Some(identity()),
            },
        ),
        (
            "stdout",
            GuestMsg::Stdout {
                id: 1,
                data: Bytes(vec![0, 1, 2, 255]),
            },
        ),
        (
            "exit",
            GuestMsg::Response {
                id: 1,
                result: Ok(Response::Exit(ExitStatus {
                    code: None,
                    signal: Some(9),
                    timed_out: true,
                })),
            },
        ),
        (
            "entries",
            GuestMsg::Response {
                id: 2,
                result: Ok(Response::Entries {
                    entries: vec![DirEntry {
                        name: "x".into(),
                        kind: FileKind::Dir,
                        size: 4096,
                    }],
                }),
            },
        ),
        (
            "stat",
            GuestMsg::Response {
                id: 3,
                result: Ok(Response::Stat { stat }),
            },
        ),
        (
            "metrics",
            GuestMsg::Response {
                id: 4,
                result: Ok(Response::Metrics {
                    metrics: Metrics {
                        cpu_usage_ns: Some(1),
                        memory_bytes: Some(2),
                        ..Metrics::default()
                    },
                }),
            },
        ),
        (
            "error",
            GuestMsg::Response {
                id: 5,
                result: Err(GuestError::new(GuestErrorCode::NotFound, "no such file")),
            },
        ),
        (
            "fatal",
            GuestMsg::Fatal {
                error: GuestError::new(GuestErrorCode::IdentityMismatch, "wrong sandbox"),
            },
        ),
    ];
    for (name, msg) in &guest {
        write(dir, &format!("guest-{name}"), &with_mode(0, &payload(msg)));
    }
    let boot = VmBoot {
        root_serial: "burrow-root".into(),
        data_serial: "burrow-data".into(),
        channel: "burrow.agent".into(),
        hostname: "worker".into(),
        env: BTreeMap::from([("PATH".into(), "/bin".into())]),
        cwd: "/".into(),
        uid: 1000,
        gid: 1000,
        hosts: "127.0.0.1 localhost\n".into(),
        resolv_conf: Some("nameserver 10.0.2.3\n".into()),
        mounts: vec![VmMount {
            tag: "m0".into(),
            target: "/data".into(),
            read_only: true,
        }],
        machine_id: Some("0123456789abcdef0123456789abcdef".into()),
        clock: Some(burrow_protocol::vm::WallClock {
            secs: 1_800_000_000,
            nanos: 5,
        }),
    };
    write(dir, "vm-boot", &with_mode(0, &payload(&boot)));
    let resume = burrow_protocol::vm::VmResume {
        boot: boot.clone(),
        entropy: vec![7u8; burrow_protocol::vm::VM_ENTROPY_BYTES].into(),
    };
    write(dir, "vm-resume", &with_mode(0, &payload(&resume)));
    let ready = burrow_protocol::vm::VmTemplateReady { version: 1 };
    write(dir, "vm-template-ready", &with_mode(0, &payload(&ready)));
    // Near misses: an unknown field, an unknown op (the agent answers
    // those from the fields it can salvage), bad base64.
    write(
        dir,
        "near-unknown-field",
        &with_mode(0, br#"{"t":"eof","id":1,"extra":true}"#),
    );
    write(
        dir,
        "near-unknown-op",
        &with_mode(0, br#"{"t":"request","id":9,"body":{"op":"format_disk"}}"#),
    );
    write(
        dir,
        "near-bad-base64",
        &with_mode(0, br#"{"t":"data","id":1,"data":"a=b"}"#),
    );

    // Streams: a session, read whole, in 1-byte and 3-byte reads.
    let mut session = Vec::new();
    for (_, m) in host.iter().take(4) {
        session.extend(encode(m));
    }
    for (_, m) in guest.iter().take(3) {
        session.extend(encode(m));
    }
    write(dir, "stream-session", &with_mode(1, &session));
    write(dir, "stream-session-bytewise", &with_mode(3, &session));
    write(dir, "stream-session-3", &with_mode(7, &session));
    let mut cut = session.clone();
    cut.truncate(session.len() - 5);
    write(dir, "stream-truncated", &with_mode(1, &cut));
    let mut malformed = encode(&host[0].1);
    malformed.extend_from_slice(&5u32.to_be_bytes());
    malformed.extend_from_slice(b"{bad}");
    malformed.extend(encode(&host[1].1));
    write(dir, "stream-malformed-middle", &with_mode(1, &malformed));
    let mut big = encode(&host[0].1);
    big.extend_from_slice(&(MAX_FRAME_LEN as u32 + 1).to_be_bytes());
    write(dir, "stream-too-large", &with_mode(1, &big));

    // Protocol 2: binary data frames in a session, and as payloads.
    let mut v2 = Vec::new();
    for (_, m) in &host {
        v2.extend(encode_for(m, PROTOCOL_VERSION));
    }
    for (_, m) in &guest {
        v2.extend(encode_for(m, PROTOCOL_VERSION));
    }
    write(dir, "stream-session-v2", &with_mode(1, &v2));
    write(dir, "stream-session-v2-5", &with_mode(11, &v2));
    let data = HostMsg::Data {
        id: 7,
        data: Bytes(vec![1, 2, 3]),
    };
    write(dir, "binary-host-data", &with_mode(0, &encode_for(&data, PROTOCOL_VERSION)[4..]));
    let out = GuestMsg::Stderr {
        id: 7,
        data: Bytes(vec![0; 40]),
    };
    write(dir, "binary-guest-stderr", &with_mode(0, &encode_for(&out, PROTOCOL_VERSION)[4..]));
}

fn full_config() -> SandboxConfig {
    let mut c = SandboxConfig::new("docker.io/library/python:3.12");
    c.driver = Some(DriverKind::Container);
    c.runtime = Some(OciRuntime::Crun);
    c.cpus = Some(1.5);
    c.memory_mb = Some(512);
    c.pids_limit = Some(64);
    c.env = BTreeMap::from([("A".into(), "1".into()), ("EMPTY".into(), String::new())]);
    c.workdir = Some("/work".into());
    c.labels = BTreeMap::from([
        ("team".into(), "infra".into()),
        ("x.y/z".into(), "a=b".into()),
    ]);
    c.mounts = vec![
        Mount::new(MountSource::Volume("cache-1".into()), "/cache"),
        Mount::new(MountSource::Host("/tmp".into()), "/host").read_only(true),
    ];
    c.network = true;
    c.idle_timeout = Some(Duration::from_secs(300));
    c.max_duration = Some(Duration::from_millis(3_600_500));
    c.demand_start = Some(true);
    c.startup_timeout = Duration::from_secs(30);
    c
}

fn config(dir: &Path) {
    for (i, name) in [
        "worker".to_owned(),
        "\u{20ac}".repeat(42),
        "\u{1f600}".repeat(32),
        "a/b".into(),
        "..".into(),
        " x".into(),
        "x\n".into(),
        "a".repeat(129),
    ]
    .iter()
    .enumerate()
    {
        write(dir, &format!("name-{i}"), &with_mode(0, name.as_bytes()));
    }
    let full = full_config();
    let json = |c: &SandboxConfig| serde_json::to_vec(c).expect("config json");
    write(dir, "config-full", &with_mode(1, &json(&full)));
    write(
        dir,
        "config-minimal",
        &with_mode(1, &json(&SandboxConfig::new("/tmp/rootfs"))),
    );
    let mut vm = SandboxConfig::new("img");
    vm.driver = Some(DriverKind::Vm);
    vm.memory_mb = Some(32);
    write(dir, "config-vm-too-small", &with_mode(1, &json(&vm)));
    write(
        dir,
        "config-unknown-field",
        &with_mode(1, br#"{"image":"x","colour":"red"}"#),
    );
    let mut m = Modify::default();
    m.memory_mb = Some(Some(1024));
    m.cpus = Some(None);
    m.env_set = BTreeMap::from([("B".into(), "2".into())]);
    m.env_unset = vec!["A".into()];
    m.labels_set = BTreeMap::from([("tier".into(), "gold".into())]);
    m.idle_timeout = Some(None);
    m.max_duration = Some(Some(Duration::from_secs(60)));
    let mut both = with_mode(2, &json(&full));
    both.push(0xff);
    both.extend(serde_json::to_vec(&m).expect("modify json"));
    write(dir, "modify-full", &both);
    let mut bad = with_mode(2, &json(&full));
    bad.push(0xff);
    bad.extend_from_slice(br#"{"memory_mb":1,"labels_set":{"a=b":"c"}}"#);
    write(dir, "modify-invalid", &bad);
    // Structured: a few fixed byte strings (every string decodes).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..4 {
        let bytes: Vec<u8> = (0..64 * (i + 1))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        write(dir, &format!("structured-{i}"), &with_mode(3, &bytes));
    }
}

fn text(dir: &Path) {
    let hex = "0123456789abcdef".repeat(4);
    let texts = [
        "1h30m".to_owned(),
        "1.5s".into(),
        "500ms".into(),
        ".5".into(),
        "0.000000001s".into(),
        "18446744073709551615.999999999s".into(),
        "1h 30m".into(),
        "1h|30m".into(),
        "1d|12h".into(),
        "18446744073709551615s|1s".into(),
        "python".into(),
        "org/tool".into(),
        "index.docker.io/org/tool".into(),
        "registry.example.com:5000/org/tool:1.2".into(),
        "localhost/x".into(),
        "[::1]:5000/a/b:c".into(),
        format!("x@sha256:{hex}"),
        format!("x:1@sha256:{hex}"),
        hex.clone(),
        "UPPER/x".into(),
        "oci:/tmp/layout:tag".into(),
        "oci:relative".into(),
        "./img".into(),
        "/abs/rootfs".into(),
    ];
    for (i, t) in texts.iter().enumerate() {
        write(dir, &format!("text-{i}"), t.as_bytes());
    }
}

fn net(dir: &Path) {
    use burrow_net::dns;
    let mut answer = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0];
    answer.extend_from_slice(b"\x03www\x07Example\x03com\x00\x00\x01\x00\x01");
    answer.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 6, 3, b'c', b'd', b'n', 0xc0, 16]);
    answer.extend_from_slice(&[0xc0, 45, 0, 1, 0, 1, 0, 0, 1, 0, 0, 4, 198, 18, 0, 7]);
    let messages = [
        dns::query(7, "pypi.org", dns::TYPE_A),
        dns::query(8, "files.pythonhosted.org", dns::TYPE_AAAA),
        answer,
        dns::error_response(9, dns::NXDOMAIN),
    ];
    for (i, m) in messages.iter().enumerate() {
        write(dir, &format!("dns-{i}"), &[&[0u8][..], m].concat());
    }
    let rules = [
        "pypi.org:443",
        "*.github.com",
        "tcp:*:22,80-90",
        "udp:10.0.0.0/8:53",
        "[2001:db8::/32]:443",
        "192.0.2.7",
    ];
    for (i, r) in rules.iter().enumerate() {
        write(dir, &format!("rule-{i}"), &[&[1u8][..], r.as_bytes()].concat());
    }
    let policies = [
        r#"{"allow": ["pypi.org:443", "*.pythonhosted.org"], "deny": ["10.0.0.0/8"]}"#,
        r#""all""#,
        "true",
        r#"{"allow": []}"#,
    ];
    for (i, p) in policies.iter().enumerate() {
        write(dir, &format!("policy-{i}"), &[&[2u8][..], p.as_bytes()].concat());
    }
    write(dir, "hello-0", &[&[3u8][..], &client_hello("api.github.com")].concat());
    write(dir, "hello-1", &[&[3u8][..], &client_hello("x.c.test")[..40]].concat());
    // The filter: a mode byte (even: HTTPS to a.test, odd: plain), a cut
    // byte, then the guest's bytes (\x01, \x02: A's and B's placeholders).
    let requests: [&[u8]; 4] = [
        b"\x01\x07GET /?t=\x01 HTTP/1.1\r\nHost: a.test\r\nAuthorization: Bearer \x01\r\n\r\n",
        b"\x00\x03POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nX: \x01\r\n\r\n",
        b"\x01\x05PUT / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\n\r\nbodyGET / HTTP/1.1\r\nHost: b.test\r\nX: \x02\r\n\r\n",
        b"\x00\x01SSH-2.0-OpenSSH_9.2\r\n\x00\x00\x02",
    ];
    for (i, r) in requests.iter().enumerate() {
        write(dir, &format!("filter-{i}"), &[&[4u8][..], r].concat());
    }
    for (i, h) in ["api.github.com", "*.example.org", "203.0.113.7"].iter().enumerate() {
        write(dir, &format!("secret-host-{i}"), &[&[5u8][..], h.as_bytes()].concat());
    }
}

/// A TLS ClientHello record asking for `name` (SNI), as a client sends it.
fn client_hello(name: &str) -> Vec<u8> {
    let n = name.as_bytes();
    let len16 = |v: usize| u16::try_from(v).expect("short").to_be_bytes();
    let mut sni = Vec::new();
    sni.extend_from_slice(&len16(n.len() + 3));
    sni.push(0);
    sni.extend_from_slice(&len16(n.len()));
    sni.extend_from_slice(n);
    let mut exts = vec![0, 0];
    exts.extend_from_slice(&len16(sni.len()));
    exts.extend_from_slice(&sni);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&len16(exts.len()));
    body.extend_from_slice(&exts);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&len16(body.len()));
    hs.extend_from_slice(&body);
    let mut record = vec![0x16, 3, 1];
    record.extend_from_slice(&len16(hs.len()));
    record.extend_from_slice(&hs);
    record
}

/// Index of `media` in `burrow_fuzz::layout::MANIFEST_MEDIA`.
fn media_selector(media: &str) -> u8 {
    let i = burrow_fuzz::layout::MANIFEST_MEDIA
        .iter()
        .position(|m| *m == media)
        .unwrap_or(2);
    u8::try_from(i).expect("few media types")
}

fn oci_manifest(dir: &Path) {
    // Real manifests and indexes, from burrow's own layout writer.
    let tmp = std::env::temp_dir().join(format!("burrow-make-seeds-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    for docker in [false, true] {
        let w = LayoutWriter::create(tmp.join(format!("layout-{docker}")))
            .expect("layout")
            .docker_media_types(docker);
        let layer = LayerSpec::entries([
            LayerEntry::dir("etc"),
            LayerEntry::file("etc/hostname", "box\n"),
            LayerEntry::symlink("bin", "usr/bin"),
        ]);
        let config = ImageConfig {
            env: vec!["PATH=/bin".into()],
            cmd: vec!["sh".into()],
            ..ImageConfig::default()
        };
        let amd = w
            .write_image(
                std::slice::from_ref(&layer),
                &config,
                &Platform::linux_amd64(),
            )
            .expect("image");
        let arm = w
            .write_image(&[layer], &config, &Platform::linux_arm64())
            .expect("image");
        let index = w
            .write_index(&[amd.manifest.clone(), arm.manifest.clone()])
            .expect("index");
        for (name, desc) in [("manifest", &amd.manifest), ("index", &index)] {
            let blob = fs::read(w.blob_path(&desc.digest).expect("path")).expect("blob");
            let sel = media_selector(&desc.media_type);
            let mut seed = vec![0, sel];
            seed.extend_from_slice(&blob);
            write(dir, &format!("{name}-docker-{docker}"), &seed);
            // Undeclared: the media type inside (or the shape) decides.
            let mut seed = vec![0, media_selector("")];
            seed.extend_from_slice(&blob);
            write(dir, &format!("{name}-docker-{docker}-undeclared"), &seed);
        }
    }
    let _ = fs::remove_dir_all(&tmp);
    let hex = "ab".repeat(32);
    let near: [(&str, String); 4] = [
        (
            "schema-1",
            format!(
                r#"{{"schemaVersion":1,"config":{{"digest":"sha256:{hex}","size":1}},"layers":[]}}"#
            ),
        ),
        ("no-layers", r#"{"schemaVersion":2,"layers":null}"#.into()),
        (
            "index-no-platform",
            format!(
                r#"{{"schemaVersion":2,"manifests":[{{"digest":"sha256:{hex}","size":3}}]}}"#
            ),
        ),
        (
            "mismatch",
            r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#
                .into(),
        ),
    ];
    for (name, json) in near {
        let mut seed = vec![0, 0];
        seed.extend_from_slice(json.as_bytes());
        write(dir, &format!("near-{name}"), &seed);
    }

    // Whole layouts, from their DNA.
    let base = Layer::new(vec![
        Entry::new(&["a"], Kind::Dir),
        Entry::new(&["a", "b"], Kind::File(b"hello".to_vec())),
        Entry::new(
            &["a", "c"],
            Kind::Symlink(TarPath::names(&["..", "sentinel"])),
        ),
        Entry::new(&["d"], Kind::HardLink(TarPath::names(&["a", "b"]))),
    ])
    .compressed(Compression::Gzip);
    let upper = Layer::new(vec![
        Entry::new(&[".wh.d"], Kind::File(vec![])),
        Entry::new(&["a", ".wh..wh..opq"], Kind::File(vec![])),
        Entry::new(&["a", "keep"], Kind::File(b"new".to_vec())),
    ]);
    let one = Image {
        layers: vec![(base.clone(), 1)],
        ..Image::default()
    };
    let layouts = [
        ("plain", one.clone()),
        (
            "oci-index-tagged",
            Image {
                wrap: 1,
                index_json: 1,
                tag: 1,
                ..one.clone()
            },
        ),
        (
            "docker-list",
            Image {
                layers: vec![(base.clone(), 3), (upper.clone(), 0)],
                wrap: 2,
                manifest_media: 1,
                config_media: 1,
                ..Image::default()
            },
        ),
        (
            "two-layers-wrong-diff-id",
            Image {
                layers: vec![(base.clone(), 1), (upper, 0)],
                diff_ids: 2,
                ..Image::default()
            },
        ),
        (
            "size-off-by-one",
            Image {
                corrupt: 1,
                ..one.clone()
            },
        ),
        (
            "missing-blob",
            Image {
                corrupt: 5,
                ..one.clone()
            },
        ),
        (
            "blob-symlink-out",
            Image {
                corrupt: 12,
                ..one.clone()
            },
        ),
        (
            "too-deep",
            Image {
                wrap: 4,
                ..one.clone()
            },
        ),
        (
            "ambiguous",
            Image {
                index_json: 3,
                ..one
            },
        ),
    ];
    for (name, image) in layouts {
        write(
            dir,
            &format!("layout-{name}"),
            &with_mode(1, &image.to_dna()),
        );
    }
}

fn unpack(dir: &Path) {
    let file = |p: &[&str], data: &[u8]| Entry::new(p, Kind::File(data.to_vec()));
    let basic = Layer::new(vec![
        Entry::new(&["a"], Kind::Dir),
        file(&["a", "b"], b"hello"),
        Entry::new(&["a", "c"], Kind::Symlink(TarPath::names(&["b"]))),
        Entry::new(&["d"], Kind::HardLink(TarPath::names(&["a", "b"]))),
        Entry::new(&["c"], Kind::Fifo),
        Entry::new(&["root"], Kind::Char),
        Entry::new(&["b"], Kind::OldDir),
    ]);
    let escapes = Layer::new(vec![
        file(&["..", "b"], b"x"),
        file(&["a"], b"abs").absolute(),
        Entry::new(&["a"], Kind::Symlink(TarPath::names(&["..", "sentinel"]))),
        file(&["a", "keep"], b"through the link"),
        Entry::new(
            &["b"],
            Kind::HardLink(TarPath::names(&["..", "sentinel", "keep"])),
        ),
        Entry::new(&["c"], Kind::Symlink(TarPath::names(&["..", ".."]))),
        file(&["c", "b"], b"x"),
    ]);
    let whiteouts = Layer::new(vec![
        Entry::new(&["a"], Kind::Dir),
        file(&["a", "b"], b"1"),
        Entry::new(&[".wh.a"], Kind::File(vec![])),
        Entry::new(&["a", ".wh..wh..opq"], Kind::File(vec![])),
        Entry::new(&[".wh..wh.plnk"], Kind::File(vec![])),
        Entry::new(&[".wh.."], Kind::File(vec![])),
    ]);
    let long = |style| {
        Layer::new(vec![
            Entry::new(&["a"], Kind::Dir).style(style),
            Entry {
                path: TarPath {
                    absolute: false,
                    tokens: vec![Token::Long(60), Token::Long(10)],
                },
                ..file(&[], b"long").style(style)
            },
            Entry {
                path: TarPath::names(&["a", "c"]),
                ..Entry::new(
                    &[],
                    Kind::Symlink(TarPath {
                        absolute: true,
                        tokens: vec![Token::Long(100)],
                    }),
                )
                .style(style)
            },
        ])
    };
    let raw = [
        ("basic", basic.clone()),
        ("escapes", escapes.clone()),
        ("whiteouts", whiteouts.clone()),
        ("gnu-long", long(Style::Gnu)),
        ("pax-long", long(Style::Pax)),
        ("ustar-prefix", long(Style::Ustar)),
        ("old-cut", long(Style::Old)),
        ("basic-gzip", basic.clone().compressed(Compression::Gzip)),
        (
            "escapes-zstd",
            escapes.clone().compressed(Compression::Zstd),
        ),
        (
            "truncated",
            Layer {
                tail: Tail::Cut(20),
                ..basic.clone()
            },
        ),
    ];
    for (name, layer) in &raw {
        // No sentinel token in these: its path is the fuzz process's own.
        write(
            dir,
            &format!("tar-{name}"),
            &with_mode(0, &layer.render(b"")),
        );
    }
    let sentinel_link = Layer::new(vec![
        Entry::new(&["a"], Kind::Symlink(TarPath::names(&["@sentinel"]))),
        file(&["a", "keep"], b"x"),
        Entry::new(
            &["b"],
            Kind::HardLink(TarPath::names(&["@sentinel", "keep"])),
        ),
    ]);
    let lower = Layer::new(vec![
        Entry::new(&["a"], Kind::Dir),
        file(&["a", "b"], b"lower"),
        Entry::new(&["c"], Kind::Dir),
        file(&["c", "d"], b"lower"),
        Entry::new(&["d"], Kind::Symlink(TarPath::names(&["..", "sentinel"]))),
    ]);
    let upper = Layer::new(vec![
        Entry::new(&[".wh.a"], Kind::File(vec![])),
        Entry::new(&["c", ".wh..wh..opq"], Kind::File(vec![])),
        file(&["c", "b"], b"upper"),
        Entry::new(&[".wh.d"], Kind::File(vec![])),
        Entry::new(&["d"], Kind::Dir),
        file(&["d", "keep"], b"upper"),
    ]);
    let archives = [
        ("layers-whiteouts", vec![lower.clone(), upper.clone()]),
        ("layers-escapes", vec![lower, escapes, sentinel_link]),
        (
            "layers-mixed",
            vec![basic.compressed(Compression::Zstd), whiteouts, upper],
        ),
    ];
    for (name, layers) in archives {
        let a = Archive { layers };
        write(dir, &format!("dna-{name}"), &with_mode(1, &a.to_dna()));
    }
}
