//! Not a library: the package's binaries are the example service (`src/main.rs`) and
//! `forgot-the-table` (`src/bin/forgot_the_table.rs`). This target exists so that `cargo test
//! --doc` compiles and runs the repository README's Rust examples (the Usage example on SQLite,
//! the ShedLock habits on the in-memory provider) against the current API.

/// The repository's README, whose Rust code blocks run as this crate's doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct Readme;
