//! What burrow's fuzz targets share: a "DNA" encoding for structured
//! inputs ([`dna`]), tar archives built from it ([`tarball`]), OCI image
//! layouts built from it ([`layout`]), and the scratch directory that
//! proves an unpack wrote nothing outside its root ([`arena`]).
//!
//! Structured inputs implement [`arbitrary::Arbitrary`] one byte per
//! choice, so every byte string decodes to some value, and
//! [`dna::Dna`] writes the bytes that decode to a given value: the seed
//! generator (`examples/make_seeds.rs`) builds its archives and layouts
//! that way, and the fuzzer mutates them choice by choice.

pub mod arena;
pub mod dna;
pub mod layout;
pub mod tarball;

/// Splits a fuzz input into its mode byte and the rest.
pub fn mode(data: &[u8]) -> Option<(u8, &[u8])> {
    data.split_first().map(|(m, rest)| (*m, rest))
}
