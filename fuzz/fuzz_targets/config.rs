//! Sandbox names, configurations and modifications: what `create` and
//! `modify` accept from SDK arguments, CLI flags and HTTP bodies.
//!
//! Input: a mode byte, then
//! - 0: a name (UTF-8, lossily);
//! - 1: a `SandboxConfig` as JSON;
//! - 2: a `SandboxConfig` as JSON, the byte 0xFF, a `Modify` as JSON;
//! - 3: a configuration and a modification built by `arbitrary` (any
//!   float, any `Duration`, any string).
//!
//! Properties: no panic, and every refusal is the typed error of its kind
//! (`invalid_name`, `invalid_config`); a valid name survives JSON; a
//! configuration that validates serialises, deserialises to one that
//! validates again and serialises to the same JSON, keeps its durations
//! (to the millisecond the wire carries) and whether demand start is on,
//! and its labels survive a list filter's query string; a modification's
//! result is valid whenever `apply_to` accepts it, and its JSON form round
//! trips.

#![no_main]

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use burrow::api::{list_query, parse_list_query};
use burrow::model::{split_scope, validate_name, validate_scope, MAX_SCOPE_BYTES};
use burrow::{
    DriverKind, ErrorCode, ListFilter, Modify, Mount, MountSource, OciRuntime, SandboxConfig,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = burrow_fuzz::mode(data) else {
        return;
    };
    match mode % 4 {
        0 => name(&String::from_utf8_lossy(rest)),
        1 => {
            if let Ok(c) = serde_json::from_slice::<SandboxConfig>(rest) {
                config(&c);
            }
        }
        2 => {
            let (c, m) = match rest.iter().position(|b| *b == 0xff) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &b"{}"[..]),
            };
            let (Ok(c), Ok(m)) = (
                serde_json::from_slice::<SandboxConfig>(c),
                serde_json::from_slice::<Modify>(m),
            ) else {
                return;
            };
            config(&c);
            modify(&c, &m);
        }
        _ => {
            let mut u = Unstructured::new(rest);
            let Ok(input) = Input::arbitrary(&mut u) else {
                return;
            };
            let c = input.config.build();
            config(&c);
            if let Some(m) = input.modify {
                modify(&c, &m.build());
            }
        }
    }
});

fn name(s: &str) {
    match validate_name(s) {
        Ok(()) => {
            // A name, or `<scope>/<name>`.
            let (scope, base) = split_scope(s);
            if let Some(scope) = scope {
                assert!(scope.len() <= MAX_SCOPE_BYTES, "{s:?}: scope length");
                validate_scope(scope).expect("the scope of a valid name is one");
            }
            assert!(!base.is_empty() && base.len() <= 128, "{s:?}: length");
            assert!(
                !base.contains('/') && base != "." && base != "..",
                "{s:?}: path-like"
            );
            assert!(!s.chars().any(char::is_control), "{s:?}: control character");
            let json = serde_json::to_string(s).expect("a name serialises");
            let back: String = serde_json::from_str(&json).expect("a name deserialises");
            assert_eq!(back, s);
            validate_name(&back).expect("a valid name stays valid");
        }
        Err(e) => assert_eq!(e.code(), ErrorCode::InvalidName, "{s:?}: {e}"),
    }
}

/// What the wire keeps of a duration: whole milliseconds, at most
/// `u64::MAX` of them.
fn on_the_wire(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Equal CPU counts, but for the last bit: serde_json (without its
/// `float_roundtrip` feature) may read a float it wrote one unit in the
/// last place off.
fn same_cpus(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            let diff = (a - b).abs();
            // Relative for normal numbers, absolute for subnormal ones.
            a == b || diff <= 2.0 * f64::EPSILON * a.abs().max(b.abs()) || diff <= f64::MIN_POSITIVE
        }
        (a, b) => a.is_none() == b.is_none(),
    }
}

fn config(c: &SandboxConfig) {
    if let Err(e) = c.validate() {
        assert_eq!(e.code(), ErrorCode::InvalidConfig, "{e}");
        if serde_json::to_vec(c).is_err() {
            assert!(c.cpus.is_some_and(|c| !c.is_finite()), "{c:?}");
        }
        return;
    }
    let json = serde_json::to_vec(c).expect("a valid configuration serialises");
    let back: SandboxConfig =
        serde_json::from_slice(&json).expect("a valid configuration deserialises");
    if let Err(e) = back.validate() {
        panic!(
            "a valid configuration is invalid after a JSON round trip: {e}\n{}",
            String::from_utf8_lossy(&json)
        );
    }
    assert!(
        same_cpus(back.cpus, c.cpus),
        "{:?} -> {:?}",
        c.cpus,
        back.cpus
    );
    let mut same = back.clone();
    same.cpus = c.cpus;
    assert_eq!(
        serde_json::to_vec(&same).expect("serialises"),
        json,
        "the JSON form is stable"
    );
    assert_eq!(back.idle_timeout, c.idle_timeout.map(on_the_wire));
    assert_eq!(back.max_duration, c.max_duration.map(on_the_wire));
    assert_eq!(back.startup_timeout, on_the_wire(c.startup_timeout));
    assert_eq!(
        back.demand_start_enabled(),
        c.demand_start_enabled(),
        "demand start changed in a JSON round trip"
    );
    let mut filter = ListFilter::default();
    for (k, v) in &c.labels {
        filter = filter.label(k.clone(), v.clone());
    }
    let parsed = parse_list_query(&list_query(&filter)).expect("a label filter's query parses");
    assert_eq!(parsed, filter, "labels survive a list query");
}

fn modify(c: &SandboxConfig, m: &Modify) {
    let json = match serde_json::to_vec(m) {
        Ok(json) => json,
        Err(e) => {
            // Only a CPU count JSON cannot carry, which no backend takes.
            assert!(
                m.cpus.flatten().is_some_and(|c| !c.is_finite()),
                "a modification does not serialise: {e}"
            );
            let err = m.apply_to(c).expect_err("a non-finite CPU count applies");
            assert_eq!(err.code(), ErrorCode::InvalidConfig, "{err}");
            return;
        }
    };
    let mut back: Modify = serde_json::from_slice(&json).expect("a modification deserialises");
    if let (Some(Some(b)), Some(Some(a))) = (back.cpus, m.cpus) {
        assert!(same_cpus(Some(b), Some(a)), "{a:?} -> {b:?}");
        back.cpus = m.cpus;
    }
    assert_eq!(
        serde_json::to_vec(&back).expect("serialises"),
        json,
        "the JSON form is stable"
    );
    // What JSON keeps of it: the same changes, durations to the
    // millisecond (saturated), every value still set or removed.
    let ms = |d: Option<Option<Duration>>| {
        d.map(|o| o.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
    };
    assert_eq!(ms(back.idle_timeout), ms(m.idle_timeout));
    assert_eq!(ms(back.max_duration), ms(m.max_duration));
    assert_eq!(
        back.cpus.map(|c| c.is_some()),
        m.cpus.map(|c| c.is_some()),
        "a CPU limit turned into its removal (or back) in JSON: {:?} -> {:?}",
        m.cpus,
        back.cpus
    );
    assert_eq!(
        (&back.memory_mb, &back.env_set, &back.env_unset),
        (&m.memory_mb, &m.env_set, &m.env_unset)
    );
    assert_eq!(
        (&back.labels_set, &back.labels_unset),
        (&m.labels_set, &m.labels_unset)
    );
    match m.apply_to(c) {
        Ok(new) => {
            new.validate()
                .expect("apply_to returns a valid configuration");
            config(&new);
        }
        Err(e) => assert_eq!(e.code(), ErrorCode::InvalidConfig, "{e}"),
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    config: ConfigIn,
    modify: Option<ModifyIn>,
}

/// A duration: mostly small (microseconds up to ten seconds), or anything.
#[derive(Debug, Arbitrary)]
enum Dur {
    Micros(u32),
    Millis(u16),
    Any(u64, u32),
}

impl Dur {
    fn get(&self) -> Duration {
        match self {
            Dur::Micros(n) => Duration::from_micros(u64::from(*n % 10_000_000)),
            Dur::Millis(n) => Duration::from_millis(u64::from(*n)),
            Dur::Any(s, n) => Duration::new(*s, n % 1_000_000_000),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct MountIn {
    volume: bool,
    source: String,
    target: String,
    read_only: bool,
}

#[derive(Debug, Arbitrary)]
struct ConfigIn {
    image: String,
    driver: Option<bool>,
    runtime: Option<u8>,
    cpus: Option<f64>,
    memory_mb: Option<u64>,
    pids_limit: Option<u64>,
    env: Vec<(String, String)>,
    workdir: Option<String>,
    labels: Vec<(String, String)>,
    mounts: Vec<MountIn>,
    network: bool,
    /// Allow and deny rules (text form): a policy when either is given.
    allow: Vec<String>,
    deny: Vec<String>,
    /// Published ports (text form): the ones that parse.
    ports: Vec<String>,
    idle_timeout: Option<Dur>,
    max_duration: Option<Dur>,
    demand_start: Option<bool>,
    startup_timeout: Dur,
}

impl ConfigIn {
    fn build(&self) -> SandboxConfig {
        let mut c = SandboxConfig::new(self.image.clone());
        c.driver = self.driver.map(|vm| {
            if vm {
                DriverKind::Vm
            } else {
                DriverKind::Container
            }
        });
        c.runtime = self.runtime.map(|r| match r % 3 {
            0 => OciRuntime::Runc,
            1 => OciRuntime::Crun,
            _ => OciRuntime::Runsc,
        });
        c.cpus = self.cpus;
        c.memory_mb = self.memory_mb;
        c.pids_limit = self.pids_limit;
        c.env = self.env.iter().cloned().collect();
        c.workdir = self.workdir.clone();
        c.labels = self.labels.iter().cloned().collect();
        c.mounts = self
            .mounts
            .iter()
            .map(|m| {
                let source = if m.volume {
                    MountSource::Volume(m.source.clone())
                } else if m.source.is_empty() {
                    MountSource::Host("/tmp".into())
                } else {
                    MountSource::Host(m.source.clone().into())
                };
                Mount::new(source, m.target.clone()).read_only(m.read_only)
            })
            .collect();
        let parsed = |rules: &[String]| rules.iter().map(|r| r.parse()).collect::<Result<Vec<_>, _>>();
        c.network = match (parsed(&self.allow), parsed(&self.deny)) {
            (Ok(allow), Ok(deny)) if !allow.is_empty() || !deny.is_empty() => {
                burrow::Network::Policy(burrow::NetworkPolicy { allow, deny })
            }
            _ => self.network.into(),
        };
        c.ports = self
            .ports
            .iter()
            .filter_map(|p| port_text(p))
            .collect();
        c.idle_timeout = self.idle_timeout.as_ref().map(Dur::get);
        c.max_duration = self.max_duration.as_ref().map(Dur::get);
        c.demand_start = self.demand_start;
        c.startup_timeout = self.startup_timeout.get();
        c
    }
}

/// A published port's text: a refusal is `invalid_config` as an error of
/// the library; one that parses reads back the same from its canonical
/// text, and that text is canonical already.
fn port_text(text: &str) -> Option<burrow::PortMapping> {
    match text.parse::<burrow::PortMapping>() {
        Ok(p) => {
            let canonical = p.to_string();
            assert_eq!(canonical.parse::<burrow::PortMapping>().ok(), Some(p), "{text:?}");
            assert_eq!(canonical.parse::<burrow::PortMapping>().unwrap().to_string(), canonical);
            Some(p)
        }
        Err(e) => {
            assert_eq!(burrow::Error::from(e).code(), ErrorCode::InvalidConfig);
            None
        }
    }
}

#[derive(Debug, Arbitrary)]
struct ModifyIn {
    cpus: Option<Option<f64>>,
    memory_mb: Option<Option<u64>>,
    env_set: Vec<(String, String)>,
    env_unset: Vec<String>,
    labels_set: Vec<(String, String)>,
    labels_unset: Vec<String>,
    idle_timeout: Option<Option<Dur>>,
    max_duration: Option<Option<Dur>>,
}

impl ModifyIn {
    fn build(&self) -> Modify {
        let mut m = Modify::default();
        m.cpus = self.cpus;
        m.memory_mb = self.memory_mb;
        m.env_set = self.env_set.iter().cloned().collect();
        m.env_unset = self.env_unset.clone();
        m.labels_set = self.labels_set.iter().cloned().collect();
        m.labels_unset = self.labels_unset.clone();
        m.idle_timeout = self.idle_timeout.as_ref().map(|d| d.as_ref().map(Dur::get));
        m.max_duration = self.max_duration.as_ref().map(|d| d.as_ref().map(Dur::get));
        m
    }
}
