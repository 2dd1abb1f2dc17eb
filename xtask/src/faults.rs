//! `cargo xtask faults`: the fault scenarios (`shedlock_conformance::faults`) of the clustered
//! and server backends, short (what `cargo test` runs) or long (`--minutes N` each), with
//! their reports; `--record` copies them to `conformance/reports/faults/` and regenerates the
//! README's provider table (its "partition / pause" column reads them).

use std::{
    path::{Path, PathBuf},
    time::SystemTime,
};

use crate::util::{cargo, code_of, loud, root, take_flag, take_value, target_dir};

/// Each scenario: its name (the report's), the provider crate whose conformance binary runs it.
pub(crate) const SCENARIOS: &[(&str, &str)] = &[
    ("etcd-cluster", "shedlock-etcd"),
    ("zookeeper-ensemble", "shedlock-zookeeper"),
    ("redis-cluster", "shedlock-redis"),
    ("redis-cluster-wait", "shedlock-redis"),
    ("valkey", "shedlock-redis"),
    ("postgres", "shedlock-postgres"),
    ("mariadb", "shedlock-mysql"),
];

/// Which scenarios `--provider` names: a scenario's name, or a provider (`redis` = its three).
fn select(provider: Option<&str>) -> Result<Vec<(&'static str, &'static str)>, String> {
    let Some(list) = provider else { return Ok(SCENARIOS.to_vec()) };
    let mut out = Vec::new();
    for want in list.split(',').map(|s| s.trim().to_ascii_lowercase()) {
        let want = match want.as_str() {
            "etcd" => "etcd-cluster",
            "zookeeper" | "zk" => "zookeeper-ensemble",
            "mysql" => "mariadb",
            "postgresql" => "postgres",
            other => other,
        }
        .to_owned();
        let found: Vec<_> = SCENARIOS
            .iter()
            .filter(|(s, k)| *s == want || (want == "redis" && *k == "shedlock-redis"))
            .copied()
            .collect();
        if found.is_empty() {
            return Err(format!(
                "no fault scenario {want:?}: the scenarios are {} (or `redis` for its three)",
                SCENARIOS.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
            ));
        }
        for f in found {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    Ok(out)
}

fn faults_dir() -> PathBuf {
    target_dir().join("conformance").join("faults")
}

/// `cargo xtask faults [--provider X] [--minutes N] [--record]`.
pub fn run(args: &[String]) -> Result<u8, String> {
    let mut args = args.to_vec();
    let provider = take_value(&mut args, "--provider")?;
    let minutes = take_value(&mut args, "--minutes")?;
    let record = take_flag(&mut args, "--record");
    if let Some(a) = args.first() {
        return Err(format!("unexpected argument {a:?}"));
    }
    let secs = match &minutes {
        Some(m) => {
            let m: f64 =
                m.parse().map_err(|_| format!("--minutes wants a number of minutes, not {m:?}"))?;
            if !(m > 0.0 && m <= 600.0) {
                return Err(format!("--minutes {m}: between 0 and 600"));
            }
            Some((m * 60.0).round() as u64)
        }
        None => None,
    };
    let scenarios = select(provider.as_deref())?;
    let began = SystemTime::now();
    let mut code = 0u8;
    for &(name, krate) in &scenarios {
        // Each scenario starts its own servers. `--exact` wants the whole test name.
        let test = full_name(krate, name)?;
        let mut cmd = cargo();
        cmd.args(["test", "-p", krate, "--test", "conformance", "--", &test, "--exact"])
            .env("SHEDLOCK_CONFORMANCE_DIR", target_dir().join("conformance"));
        if let Some(s) = secs {
            cmd.env("SHEDLOCK_FAULTS_SECS", s.to_string());
        }
        eprintln!("xtask: faults {name}: cargo test -p {krate} --test conformance -- {test}");
        let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            loud(&format!("fault scenario {name} FAILED"));
            code = code.max(code_of(status).max(1));
        }
    }
    let fresh = fresh(&faults_dir(), began, &scenarios);
    if fresh.len() < scenarios.len() {
        loud(&format!(
            "only {} of {} fault reports were written (see above)",
            fresh.len(),
            scenarios.len()
        ));
        code = code.max(1);
    }
    if record {
        if code != 0 {
            return Err("not recording: a scenario failed".to_owned());
        }
        let dest = root().join("conformance").join("reports").join("faults");
        std::fs::create_dir_all(&dest).map_err(|e| format!("creating {}: {e}", dest.display()))?;
        for f in &fresh {
            for ext in ["md", "json"] {
                let from = f.with_extension(ext);
                let to = dest.join(from.file_name().unwrap_or_default());
                std::fs::copy(&from, &to)
                    .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
            }
        }
        eprintln!("xtask: {} fault report(s) recorded in {}", fresh.len(), dest.display());
        let rows = crate::conformance::regenerate_readme_table()?;
        eprintln!("xtask: README provider table regenerated ({rows} rows)");
    }
    Ok(code)
}

/// The test name of scenario `name` in `krate`'s conformance binary (`<suite>::faults::<name>`).
fn full_name(krate: &str, name: &str) -> Result<String, String> {
    let out = cargo()
        .args(["test", "-q", "-p", krate, "--test", "conformance", "--", "--list"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let suffix = format!("::faults::{name}: test");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with(&suffix))
        .map(|l| l.trim_end_matches(": test").to_owned())
        .ok_or_else(|| {
            format!("{krate}'s conformance binary has no test ending in ::faults::{name}")
        })
}

/// The JSON reports of `scenarios` in `dir` written since `since`.
fn fresh(dir: &Path, since: SystemTime, scenarios: &[(&str, &str)]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (name, _) in scenarios {
        let p = dir.join(format!("{name}.json"));
        let newer = std::fs::metadata(&p).and_then(|m| m.modified()).is_ok_and(|t| t >= since);
        if newer {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_takes_scenarios_providers_and_aliases() {
        assert_eq!(select(None).unwrap().len(), SCENARIOS.len());
        assert_eq!(select(Some("redis")).unwrap().len(), 3);
        assert_eq!(
            select(Some("etcd,mysql")).unwrap(),
            vec![("etcd-cluster", "shedlock-etcd"), ("mariadb", "shedlock-mysql")]
        );
        assert!(select(Some("memcached")).unwrap_err().contains("etcd-cluster"));
    }
}
