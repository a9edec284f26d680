//! burrow-conformance: runs the shared lifecycle cases of
//! `tests/conformance/cases.json` against any `Arc<dyn burrow::Backend>`.
//!
//! The cases are language-neutral and shared with every SDK (their step
//! vocabulary is in `tests/conformance/README.md`); this crate is their Rust
//! interpreter, so that a backend of your own (a cloud, a cluster, a test
//! double) proves it keeps the same lifecycle rules as the built-in ones,
//! from a plain `#[tokio::test]`:
//!
//! ```no_run
//! use std::sync::Arc;
//! use burrow_conformance::{Kit, Store};
//!
//! #[tokio::test(flavor = "multi_thread")]
//! async fn my_backend_conforms() {
//!     let report = Kit::new(|| async {
//!         // A fresh, empty store per case, and how to open a backend on it.
//!         let cluster = my_backend::TestCluster::start().await?;
//!         let url = cluster.url();
//!         Ok(Store::new(move || {
//!             let url = url.clone();
//!             async move { Ok(Arc::new(my_backend::Backend::connect(&url).await?) as Arc<dyn burrow::Backend>) }
//!         })
//!         .location(cluster.url())
//!         .keep(cluster))
//!     })
//!     .image("docker.io/library/busybox:latest")
//!     .run()
//!     .await;
//!     println!("{report}");
//!     report.assert_all_passed();
//! }
//! # mod my_backend {
//! #     pub struct TestCluster;
//! #     impl TestCluster {
//! #         pub async fn start() -> Result<Self, burrow_conformance::BoxError> { Ok(TestCluster) }
//! #         pub fn url(&self) -> String { String::new() }
//! #     }
//! #     pub struct Backend;
//! #     impl Backend {
//! #         pub async fn connect(_: &str) -> burrow::Result<burrow::RemoteBackend> { unimplemented!() }
//! #     }
//! # }
//! ```
//!
//! Every case runs in its own store and ends with whatever it left behind
//! destroyed. Expectations compare error codes ([`burrow::ErrorCode`]),
//! statuses, ids, generations and counts, never message text. A failure
//! names the case, the step, the op, and what was expected against what
//! happened. A case that needs a capability the backend does not report
//! ([`burrow::Backend::capabilities`]; the case's capability tags,
//! [`CAPABILITY_TAGS`]) is reported unsupported without being run, and so
//! is one where the backend answers `unsupported` for an operation no
//! capability covers; neither is ever counted as passed. A backend that
//! claims a capability and then answers `unsupported` for it fails.
//!
//! Races "in processes" (several OS processes converging on one name, an
//! attached sandbox whose owner exits) need a program that serves one
//! caller: see [`Kit::process_spawner`] and [`caller`]. This crate's own
//! `burrow-conformance-caller` binary is one for the local backend.

mod args;
pub mod caller;
mod cases;
mod interp;
mod kit;
mod ops;
mod outcome;
mod race;
mod report;
mod value;

pub use cases::{Case, Cases, CasesError, CAPABILITY_TAGS, FORMAT};
pub use kit::{BoxError, Caller, Kit, Store};
pub use report::{CaseOutcome, CaseReport, Failure, ProcessRaces, Report};
