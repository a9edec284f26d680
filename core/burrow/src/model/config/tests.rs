//! Tests of the sandbox configuration (validation, wire form).
use super::*;

#[test]
fn defaults_validate_and_round_trip() {
    let mut c = SandboxConfig::new("/tmp/rootfs");
    c.idle_timeout = Some(Duration::from_secs(5));
    c.validate().unwrap();
    let json = serde_json::to_string(&c).unwrap();
    let back: SandboxConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, c);
}

#[test]
fn bad_values_are_invalid_config() {
    let base = SandboxConfig::new("img");
    type Case = Box<dyn Fn(&mut SandboxConfig)>;
    let cases: Vec<Case> = vec![
        Box::new(|c| c.image = String::new()),
        Box::new(|c| c.cpus = Some(0.0)),
        Box::new(|c| c.cpus = Some(f64::NAN)),
        Box::new(|c| c.memory_mb = Some(1)),
        Box::new(|c| drop(c.env.insert("A=B".into(), "x".into()))),
        Box::new(|c| c.workdir = Some("relative".into())),
        Box::new(|c| c.workdir = Some("/a/../b".into())),
        Box::new(|c| {
            c.mounts.push(Mount {
                source: MountSource::Volume("../x".into()),
                target: "/data".into(),
                read_only: false,
            })
        }),
        Box::new(|c| {
            c.mounts.push(Mount {
                source: MountSource::Host("/definitely/not/here".into()),
                target: "/data".into(),
                read_only: false,
            })
        }),
        Box::new(|c| c.startup_timeout = Duration::ZERO),
        Box::new(|c| {
            c.driver = Some(DriverKind::Vm);
            c.memory_mb = Some(32);
        }),
    ];
    for (i, f) in cases.iter().enumerate() {
        let mut c = base.clone();
        f(&mut c);
        let err = c.validate().unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::InvalidConfig, "case {i}");
    }
}

#[test]
fn drivers_parse_and_unknown_ones_are_invalid_config() {
    assert_eq!("vm".parse::<DriverKind>().unwrap(), DriverKind::Vm);
    assert_eq!(
        "container".parse::<DriverKind>().unwrap(),
        DriverKind::Container
    );
    let err = "firecracker".parse::<DriverKind>().unwrap_err();
    assert_eq!(err.code(), crate::ErrorCode::InvalidConfig);
    let json = serde_json::to_string(&DriverKind::Vm).unwrap();
    assert_eq!(json, "\"vm\"");
}

#[test]
fn a_driver_left_to_the_backend_stays_off_the_wire() {
    let c = SandboxConfig::new("img");
    assert_eq!(c.driver, None);
    let json = serde_json::to_value(&c).unwrap();
    assert!(json.get("driver").is_none(), "{json}");
    // Configurations from older clients and records name one.
    let old: SandboxConfig = serde_json::from_str(r#"{"image":"img","driver":"vm"}"#).unwrap();
    assert_eq!(old.driver, Some(DriverKind::Vm));
    let none: SandboxConfig = serde_json::from_str(r#"{"image":"img"}"#).unwrap();
    assert_eq!(none.driver, None);
}

#[test]
fn the_backend_fills_only_what_the_configuration_leaves_open() {
    let mut c = SandboxConfig::new("img");
    c.resolve_defaults(DriverKind::Vm, OciRuntime::Runc, true);
    assert_eq!(c.driver, Some(DriverKind::Vm));
    assert_eq!(c.demand_start, None);
    // A later idle timeout turns demand start on...
    assert!(!c.demand_start_enabled());
    c.idle_timeout = Some(Duration::from_secs(5));
    assert!(c.demand_start_enabled());
    // ...unless the backend's default was off at create.
    let mut c = SandboxConfig::new("img");
    c.resolve_defaults(DriverKind::Container, OciRuntime::Runc, false);
    c.idle_timeout = Some(Duration::from_secs(5));
    assert_eq!(c.demand_start, Some(false));
    assert!(!c.demand_start_enabled());
    // What the configuration says wins.
    let mut c = SandboxConfig::new("img");
    c.driver = Some(DriverKind::Container);
    c.demand_start = Some(true);
    c.runtime = Some(OciRuntime::Crun);
    c.resolve_defaults(DriverKind::Vm, OciRuntime::Runsc, false);
    assert_eq!(c.driver, Some(DriverKind::Container));
    assert_eq!(c.runtime, Some(OciRuntime::Crun));
    assert_eq!(c.demand_start, Some(true));
    // The runtime left open takes the backend's.
    let mut c = SandboxConfig::new("img");
    c.resolve_defaults(DriverKind::Container, OciRuntime::Runsc, true);
    assert_eq!(c.oci_runtime(), OciRuntime::Runsc);
    // Records from before the runtime could be left open name one.
    let old: SandboxConfig = serde_json::from_str(r#"{"image":"img","runtime":"crun"}"#).unwrap();
    assert_eq!(old.runtime, Some(OciRuntime::Crun));
    let none: SandboxConfig = serde_json::from_str(r#"{"image":"img"}"#).unwrap();
    assert_eq!(none.oci_runtime(), OciRuntime::Runc);
}

#[test]
fn runsc_containers_refuse_networking() {
    let mut c = SandboxConfig::new("img");
    c.network = burrow_net::Network::All;
    c.resolve_defaults(DriverKind::Container, OciRuntime::Runsc, true);
    match c.validate().unwrap_err() {
        Error::InvalidConfig { field, .. } => assert_eq!(field, "network"),
        other => panic!("unexpected {other:?}"),
    }
    c.runtime = Some(OciRuntime::Crun);
    c.validate().unwrap();
    // A backend that runs runsc otherwise (a VM ignores the runtime).
    c.runtime = Some(OciRuntime::Runsc);
    c.driver = Some(DriverKind::Vm);
    c.validate().unwrap();
}

#[test]
fn vm_limits_apply_once_the_driver_is_known() {
    let mut c = SandboxConfig::new("img");
    c.memory_mb = Some(32);
    c.validate().unwrap();
    c.resolve_defaults(DriverKind::Vm, OciRuntime::Runc, true);
    assert_eq!(
        c.validate().unwrap_err().code(),
        crate::ErrorCode::InvalidConfig
    );
}

/// Found by the `config` fuzz target: a startup timeout below a
/// millisecond validated, and came back from its JSON form (whole
/// milliseconds) as zero, which does not.
#[test]
fn sub_millisecond_durations_are_invalid_config() {
    let field = |c: &SandboxConfig| match c.validate() {
        Err(Error::InvalidConfig { field, .. }) => field,
        other => panic!("unexpected {other:?}"),
    };
    let mut c = SandboxConfig::new("img");
    c.startup_timeout = Duration::from_micros(500);
    assert_eq!(field(&c), "startup_timeout");
    let mut c = SandboxConfig::new("img");
    c.max_duration = Some(Duration::from_nanos(1));
    assert_eq!(field(&c), "max_duration");
    // An idle timeout of zero disables reclaim; 0.5 ms would have
    // enabled it (and demand start) until its first round trip.
    let mut c = SandboxConfig::new("img");
    c.idle_timeout = Some(Duration::from_micros(500));
    assert_eq!(field(&c), "idle_timeout");
    c.idle_timeout = Some(Duration::ZERO);
    c.validate().unwrap();
    // A millisecond and up is carried exactly.
    c.startup_timeout = Duration::from_millis(1);
    c.max_duration = Some(Duration::from_millis(1));
    c.idle_timeout = Some(Duration::from_millis(1));
    c.validate().unwrap();
    let back: SandboxConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    back.validate().unwrap();
    assert_eq!(back, c);
}

/// Found by the `config` fuzz target: a duration past `u64::MAX`
/// milliseconds wrapped around in its JSON form (`as u64`), to any
/// value, zero included; it is now the largest one.
#[test]
fn huge_durations_saturate_on_the_wire() {
    let mut c = SandboxConfig::new("img");
    // 2^61 s is 2^64 * 125 ms: it wrapped to exactly zero.
    c.startup_timeout = Duration::from_secs(1 << 61);
    c.max_duration = Some(Duration::MAX);
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["startup_timeout"], serde_json::json!(u64::MAX));
    assert_eq!(json["max_duration"], serde_json::json!(u64::MAX));
    let back: SandboxConfig = serde_json::from_value(json).unwrap();
    assert_eq!(back.startup_timeout, Duration::from_millis(u64::MAX));
}

/// Found by the `config` fuzz target (through `Modify`): a NaN CPU
/// count was written as `null`, which reads back as no limit at all.
#[test]
fn non_finite_cpus_are_not_written_as_null() {
    for c in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut config = SandboxConfig::new("img");
        config.cpus = Some(c);
        let err = serde_json::to_string(&config).unwrap_err();
        assert!(err.to_string().contains("cpus"), "{err}");
        match SandboxConfig::check_cpus(Some(c)).unwrap_err() {
            Error::InvalidConfig { field, .. } => assert_eq!(field, "cpus"),
            other => panic!("unexpected {other:?}"),
        }
    }
    SandboxConfig::check_cpus(Some(1.5)).unwrap();
    SandboxConfig::check_cpus(None).unwrap();
}

#[test]
fn unknown_fields_are_rejected() {
    let err = serde_json::from_str::<SandboxConfig>(r#"{"image":"x","colour":"red"}"#);
    assert!(err.is_err());
}

/// Issue 56: a volume at `/.burrow` replaced the container's agent (PID 1,
/// which installs the seccomp filter) with the tenant's file; `/proc/sys`
/// was accepted too. Every spelling is refused, naming the mount.
#[test]
fn mounts_over_the_agent_or_the_kernels_files_are_invalid_config() {
    let field = |target: &str| {
        let mut c = SandboxConfig::new("img");
        c.mounts
            .push(Mount::new(MountSource::Volume("ok".into()), "/data"));
        c.mounts
            .push(Mount::new(MountSource::Volume("v".into()), target));
        match c.validate() {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("{target:?}: unexpected {other:?}"),
        }
    };
    for target in [
        "/",
        "//",
        "/.burrow",
        "/.burrow/agent",
        "//.burrow",
        "/./.burrow",
        "/.burrow/",
        "/proc",
        "/proc/sys",
        "/./proc",
        "//proc",
        "/proc/.",
        "/sys",
        "/sys/x",
        "/dev",
        "/dev/shm",
        "/data/",
        "//data",
    ] {
        assert_eq!(field(target), "mounts[1].target", "{target:?}");
    }
    let mut c = SandboxConfig::new("img");
    c.mounts
        .push(Mount::new(MountSource::Volume("v".into()), "/data"));
    c.mounts
        .push(Mount::new(MountSource::Volume("w".into()), "/.burrowed/x"));
    c.validate().unwrap();
}

#[test]
fn workdirs_under_proc_are_invalid_config() {
    for w in ["/proc/self/fd/7", "//proc/./self", "/proc"] {
        let mut c = SandboxConfig::new("img");
        c.workdir = Some(w.into());
        match c.validate() {
            Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "workdir", "{w:?}"),
            other => panic!("{w:?}: unexpected {other:?}"),
        }
    }
    let mut c = SandboxConfig::new("img");
    c.workdir = Some("/srv/./app/".into());
    c.validate().unwrap();
}

#[test]
fn labels_with_invisible_or_reordering_characters_are_invalid_config() {
    for (k, v) in [
        ("team\u{202e}", "a"),
        ("te\u{200b}am", "a"),
        ("team", "pro\u{2066}d"),
        ("team", "\u{feff}prod"),
    ] {
        let mut c = SandboxConfig::new("img");
        c.labels.insert(k.into(), v.into());
        match c.validate() {
            Err(Error::InvalidConfig { field, .. }) => assert_eq!(field, "labels", "{k:?}={v:?}"),
            other => panic!("{k:?}={v:?}: unexpected {other:?}"),
        }
    }
    let mut c = SandboxConfig::new("img");
    c.labels.insert("équipe".into(), "café ☕".into());
    c.validate().unwrap();
}
