//! Helpers shared by the integration tests of `burrow-server`.
//!
//! Each test binary includes this module with `mod common;` and uses only
//! part of it, hence `dead_code` is allowed here.
#![allow(dead_code)]

pub use burrow_test_support::pg;
