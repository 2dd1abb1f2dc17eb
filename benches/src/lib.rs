//! Criterion benchmarks for shedlock providers live in `benches/`: run them with
//! `cargo xtask bench` or `cargo bench -p shedlock-benches`. Each provider's benchmark sits beside
//! the raw backend operation its acquire builds on, so the provider's overhead is visible.
