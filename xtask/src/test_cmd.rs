//! `cargo xtask test`: THE project's test command.

use std::{collections::BTreeSet, time::Instant};

use serde_json::Value;
use shedlock_launcher::{Backend, LaunchError, LaunchOptions, Service, backends_dir, skip_list};

use crate::{
    provision, runner,
    util::{cargo, code_of, interrupted, loud, metadata, root, trap_signals},
};

/// The backends a provider crate's tests need: `[package.metadata.shedlock] backends = [...]`,
/// else by the crate's name.
fn backends_of(package: &Value) -> Vec<Backend> {
    if let Some(list) = package.pointer("/metadata/shedlock/backends").and_then(Value::as_array) {
        return list.iter().filter_map(|v| v.as_str().and_then(Backend::from_name)).collect();
    }
    let name = package.get("name").and_then(Value::as_str).unwrap_or_default();
    match name.strip_prefix("shedlock-").unwrap_or(name) {
        "memory" | "sqlite" | "sql" | "conformance" | "launcher" => Vec::new(),
        "mysql" | "mariadb" => vec![Backend::MariaDb],
        "redis" => vec![Backend::Redis, Backend::Valkey],
        other => Backend::from_name(other).into_iter().collect(),
    }
}

/// Backends needed by the workspace's provider crates (those under `providers/`).
pub fn needed_backends() -> Result<Vec<Backend>, String> {
    let v = metadata()?;
    let providers_dir = root().join("providers");
    let mut set = BTreeSet::new();
    for p in v.get("packages").and_then(Value::as_array).into_iter().flatten() {
        let manifest = p.get("manifest_path").and_then(Value::as_str).unwrap_or_default();
        if std::path::Path::new(manifest).starts_with(&providers_dir) {
            set.extend(backends_of(p));
        }
    }
    Ok(set.into_iter().collect())
}

/// Starts `backends` in parallel; failures are reported (the tests will fail with the same
/// message through `shared()`), not fatal here.
pub fn start_all(backends: &[Backend], opts: &LaunchOptions) -> Vec<Service> {
    let results: Vec<(Backend, Result<Service, LaunchError>)> = std::thread::scope(|s| {
        let handles: Vec<_> = backends
            .iter()
            .map(|b| {
                let b = *b;
                let opts = opts.clone();
                s.spawn(move || (b, Service::start(b, &opts)))
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut started = Vec::new();
    for (b, r) in results {
        match r {
            Ok(s) => {
                eprintln!(
                    "xtask: {:<20} {:>6} ms  {}={}",
                    b.name(),
                    s.started_in().as_millis(),
                    b.env_var(),
                    s.url()
                );
                started.push(s);
            }
            Err(e) => loud(&format!(
                "{} COULD NOT BE STARTED; its tests will fail:\n{e}",
                b.name().to_ascii_uppercase()
            )),
        }
    }
    started
}

/// `cargo xtask test [-- <cargo test args>]`
pub fn run(args: &[String]) -> Result<u8, String> {
    let extra: Vec<String> = match args.split_first() {
        None => Vec::new(),
        Some((first, rest)) if first == "--" => rest.to_vec(),
        Some((first, _)) => {
            return Err(format!(
                "unexpected argument {first:?}: pass cargo test arguments after --"
            ));
        }
    };
    let began = Instant::now();
    let flag = trap_signals();

    let unusable = provision::provision(false);
    let mut skip = skip_list();
    let valkey_missing = unusable.iter().any(|(b, _)| *b == Backend::Valkey);
    let valkey_given = std::env::var(Backend::Valkey.env_var()).is_ok_and(|v| !v.trim().is_empty());
    if valkey_missing && !valkey_given && !skip.iter().any(|s| s == "valkey" || s == "all") {
        skip.push("valkey".to_owned());
        loud(
            "VALKEY (optional) IS NOT INSTALLED: its tests are SKIPPED (SHEDLOCK_SKIP_BACKENDS=valkey).\n\
             Install it with `cargo xtask provision` (bookworm-backports) or set SHEDLOCK_VALKEY_URL.",
        );
    }
    for (b, e) in &unusable {
        if *b != Backend::Valkey {
            eprintln!("xtask: {} unusable: {e}", b.name());
        }
    }

    let needed: Vec<Backend> = needed_backends()?
        .into_iter()
        .filter(|b| !skip.iter().any(|s| s == "all" || Backend::from_name(s) == Some(*b)))
        .collect();
    eprintln!(
        "xtask: backends for the providers' tests: {}",
        needed.iter().map(|b| b.name()).collect::<Vec<_>>().join(" ")
    );
    let services = start_all(&needed, &LaunchOptions::new());

    let mut code = 0u8;
    let mut env: Vec<(String, String)> =
        services.iter().map(|s| (s.backend().env_var().to_owned(), s.url().to_owned())).collect();
    if !skip.is_empty() {
        env.push(("SHEDLOCK_SKIP_BACKENDS".to_owned(), skip.join(",")));
    }
    env.push(("SHEDLOCK_BACKENDS_DIR".to_owned(), backends_dir().display().to_string()));

    // The workspace's test binaries: built by one cargo, run by us, several at once
    // (`runner`). Then the doctests, and the core's optional features (metrics, macros) on
    // their own: in a workspace build they are on only if some member happens to enable them.
    let workspace = ["test", "--workspace", "--all-targets"];
    eprintln!("xtask: cargo {} --no-run", workspace.join(" "));
    match runner::build(&workspace) {
        Err(e) => {
            loud(&e);
            code = code.max(101);
        }
        Ok(bins) => {
            let jobs = runner::jobs();
            eprintln!("xtask: running {} test binaries, {jobs} at a time", bins.len());
            // A filter of the caller's would clash with a suite's: then binaries run whole.
            let bins = if extra.is_empty() { runner::by_suite(bins) } else { bins };
            let total = bins.len();
            let (suites, rest) = runner::schedule(bins, &runner::remembered());
            let coarse_jobs = runner::coarse_jobs();
            let (coarse, suites) = if coarse_jobs == 0 {
                (Vec::new(), suites)
            } else {
                let names = runner::coarse_suites(&root().join("conformance").join("reports"));
                runner::split_coarse(suites, &names)
            };
            let (n_coarse, first) = (coarse.len(), suites.len());
            eprintln!(
                "xtask: first the {first} timing suites ({jobs} at a time), then the other \
                 binaries; beside both, the {n_coarse} coarse suites ({coarse_jobs} at a time)"
            );
            let mut done = std::thread::scope(|s| {
                let coarse = s.spawn(|| {
                    runner::run_all(coarse, (0, total), coarse_jobs, &extra, &env, &flag)
                });
                let mut done =
                    runner::run_all(suites, (n_coarse, total), jobs, &extra, &env, &flag);
                // The rest includes the kit's CPU-heavy self-tests: at most two at a time.
                let rest_jobs = jobs.min(2);
                done.extend(runner::run_all(
                    rest,
                    (n_coarse + first, total),
                    rest_jobs,
                    &extra,
                    &env,
                    &flag,
                ));
                match coarse.join() {
                    Ok(c) => done.extend(c),
                    Err(_) => {
                        loud("THE COARSE SUITES' RUNNER PANICKED: their results are lost");
                        code = code.max(101);
                    }
                }
                done
            });
            runner::remember(&done);
            done.sort_by_key(|f| f.bin.id());
            let failed: Vec<String> = done
                .iter()
                .filter(|f| f.code != 0)
                .map(|f| format!("  {} (exit {})", f.bin.id(), f.code))
                .collect();
            if !failed.is_empty() {
                loud(&format!("{} TEST BINARIES FAILED:\n{}", failed.len(), failed.join("\n")));
                code = code.max(101);
            }
        }
    }
    let steps: [&[&str]; 2] = [
        &["test", "--workspace", "--doc"],
        &["test", "-p", "shedlock", "--all-features", "--all-targets", "--no-fail-fast"],
    ];
    for step in steps {
        if interrupted(&flag) {
            code = code.max(130);
            break;
        }
        let mut cmd = cargo();
        cmd.args(step);
        if !extra.is_empty() {
            cmd.arg("--").args(&extra);
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        eprintln!("xtask: cargo {}", step.join(" "));
        let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            code = code.max(code_of(status));
        }
    }
    let stop = Instant::now();
    drop(services);
    eprintln!(
        "xtask: services stopped in {:.1} s; `cargo xtask test` took {:.0} s",
        stop.elapsed().as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    if !skip.is_empty() {
        loud(&format!("SKIPPED ON REQUEST: SHEDLOCK_SKIP_BACKENDS={}", skip.join(",")));
    }
    if interrupted(&flag) {
        return Ok(code.max(130));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn backends_by_name_or_metadata() {
        assert_eq!(backends_of(&json!({"name": "shedlock-postgres"})), [Backend::Postgres]);
        assert_eq!(backends_of(&json!({"name": "shedlock-mysql"})), [Backend::MariaDb]);
        assert_eq!(backends_of(&json!({"name": "shedlock-sqlite"})), []);
        assert_eq!(
            backends_of(
                &json!({"name": "shedlock-etcd", "metadata": {"shedlock": {"backends": ["etcd", "etcd-cluster"]}}})
            ),
            [Backend::Etcd, Backend::EtcdCluster]
        );
    }
}
