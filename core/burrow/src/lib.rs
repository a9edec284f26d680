//! burrow
