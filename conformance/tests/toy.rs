//! The whole suite against the toy TCP provider of `examples/third_party` (compiled in from
//! there), so that the network checks — C24 through the fault proxy, C25 restart — and the
//! round-trip figures run in the kit's own tests. Report name: "toy".

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../examples/third_party/src/lib.rs"]
mod shedlock_toy;

mod conformance {
    use super::shedlock_toy;
    include!("../examples/third_party/tests/conformance.rs");

    pub(crate) fn run() -> std::process::ExitCode {
        main()
    }
}

fn main() -> std::process::ExitCode {
    conformance::run()
}
