//! `cargo xtask mutants [memory|toy] [--shard K/N] [-- <cargo mutants args>]`: how strong the
//! conformance kit is, measured with cargo-mutants. Each mutant of the provider's code must make
//! the conformance suite fail. On request only (not in CI): about 50 mutants per target, each a
//! rebuild plus a suite run.

use std::process::Command;

use crate::util::{code_of, root, target_dir};

/// What one target mutates and which tests judge it.
fn plan(target: &str) -> Result<(Vec<String>, std::path::PathBuf), String> {
    match target {
        // The reference provider, judged by the kit's own suite run against it.
        "memory" => Ok((
            [
                "--package",
                "shedlock-memory",
                "--test-package",
                "shedlock-conformance",
                "--",
                "--test",
                "memory",
            ]
            .map(str::to_owned)
            .to_vec(),
            root(),
        )),
        // The third-party example provider (its own workspace), judged by its conformance test.
        // In place: its path dependencies point out of its workspace (`../..`), which a scratch
        // copy cannot follow (cargo-mutants 27.1 resolves them to `/`); cargo-mutants restores
        // each mutated file after the mutant's run.
        "toy" => Ok((
            ["--in-place", "--", "--test", "conformance"].map(str::to_owned).to_vec(),
            root().join("conformance/examples/third_party"),
        )),
        other => Err(format!("unknown mutants target {other:?}: memory or toy")),
    }
}

/// Runs cargo-mutants (installs it with `cargo install --locked cargo-mutants` when missing).
pub fn run(args: &[String]) -> Result<u8, String> {
    let (ours, passthrough) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let mut target = "memory".to_owned();
    let mut shard = None;
    let mut it = ours.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--shard" => shard = Some(it.next().ok_or("--shard needs K/N")?.clone()),
            t if !t.starts_with('-') => target = t.to_owned(),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let (plan_args, dir) = plan(&target)?;
    let installed = Command::new("cargo")
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        eprintln!("xtask: installing cargo-mutants (cargo install --locked cargo-mutants)");
        let s = Command::new("cargo")
            .args(["install", "--locked", "cargo-mutants"])
            .status()
            .map_err(|e| format!("cannot run cargo install: {e}"))?;
        if !s.success() {
            return Err("cargo install cargo-mutants failed".into());
        }
    }
    let out = target_dir().join(format!("mutants-{target}"));
    let (before, after) = match plan_args.iter().position(|a| a == "--") {
        Some(i) => (&plan_args[..i], &plan_args[i + 1..]),
        None => (&plan_args[..], &[][..]),
    };
    let mut cmd = Command::new("cargo");
    cmd.current_dir(&dir).arg("mutants").args(before).arg("--output").arg(&out);
    // cargo-mutants 27 runs its baseline with the mutated package's tests only, not
    // `--test-package`'s (so `--test memory` is not found there): skip the baseline and give the
    // timeout it would have derived (the memory suite takes 30-60 s here).
    cmd.args(["--baseline", "skip", "--timeout", "300"]);
    if let Some(s) = &shard {
        cmd.args(["--shard", s]);
    }
    cmd.args(passthrough.iter().take_while(|a| *a != "--"));
    cmd.arg("--").args(after);
    // A target dir of its own: cargo-mutants copies the tree and builds it there.
    cmd.env("CARGO_TARGET_DIR", target_dir().join(format!("mutants-build-{target}")));
    eprintln!("xtask: cargo mutants on {target} (results in {})", out.display());
    let status = cmd.status().map_err(|e| format!("cannot run cargo mutants: {e}"))?;
    eprintln!(
        "xtask: see {}/mutants.out/outcomes.json; caught / (caught + missed) is the kit's score",
        out.display()
    );
    Ok(code_of(status))
}
