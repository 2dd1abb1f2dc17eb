//! `cargo xtask msrv`: every crate meant for crates.io builds (`cargo check --lib`, default
//! features plus the core's optional ones) with the toolchain of the `rust-version` it declares,
//! installed with rustup when missing. Crates are checked in groups of one `rust-version`, each
//! group in its own target dir (`<target dir>/msrv/<version>`), against the committed Cargo.lock.

use std::{collections::BTreeMap, process::Command};

use serde_json::Value;

use crate::util::{code_of, metadata, root, target_dir};

/// Optional features of the core that the check must cover too.
const EXTRA_FEATURES: &str = "shedlock/metrics,shedlock/macros";

/// The publishable packages by declared `rust-version`.
fn groups(meta: &Value) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in meta.get("packages").and_then(Value::as_array).into_iter().flatten() {
        let name = p.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        // `publish = false` shows as an empty list.
        if p.get("publish").and_then(Value::as_array).is_some_and(Vec::is_empty) {
            continue;
        }
        let Some(version) = p.get("rust_version").and_then(Value::as_str) else {
            return Err(format!("{name} declares no rust-version: every published crate must"));
        };
        out.entry(version.to_owned()).or_default().push(name);
    }
    Ok(out)
}

fn toolchain_installed(version: &str) -> bool {
    Command::new("rustup")
        .args(["run", version, "rustc", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the check; the exit code is the first failure's.
pub fn run(args: &[String]) -> Result<u8, String> {
    if let Some(a) = args.first() {
        return Err(format!("msrv takes no arguments, got {a:?}"));
    }
    let groups = groups(&metadata()?)?;
    let mut failed = Vec::new();
    for (version, packages) in &groups {
        eprintln!("xtask msrv: Rust {version}: {}", packages.join(" "));
        if !toolchain_installed(version) {
            let status = Command::new("rustup")
                .args(["toolchain", "install", version, "--profile", "minimal"])
                .status()
                .map_err(|e| format!("cannot run rustup (needed for the MSRV check): {e}"))?;
            if !status.success() {
                return Err(format!("rustup could not install Rust {version}"));
            }
        }
        let mut cmd = Command::new("rustup");
        cmd.current_dir(root())
            .args(["run", version, "cargo", "check", "--lib", "--locked"])
            .env("CARGO_TARGET_DIR", target_dir().join("msrv").join(version));
        for p in packages {
            cmd.args(["-p", p]);
        }
        if packages.iter().any(|p| p == "shedlock") {
            cmd.args(["--features", EXTRA_FEATURES]);
        }
        let status = cmd.status().map_err(|e| format!("cannot run cargo {version}: {e}"))?;
        if !status.success() {
            failed.push((version.clone(), code_of(status)));
        }
    }
    if failed.is_empty() {
        eprintln!("xtask msrv: every crate builds with its declared rust-version");
        Ok(0)
    } else {
        let list: Vec<String> = failed.iter().map(|(v, _)| v.clone()).collect();
        eprintln!("xtask msrv: FAILED for rust-version {}", list.join(", "));
        Ok(failed[0].1.max(1))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::groups;

    #[test]
    fn publishable_crates_are_grouped_by_rust_version_and_must_declare_one() {
        let meta = json!({"packages": [
            {"name": "shedlock", "rust_version": "1.85", "publish": null},
            {"name": "shedlock-redis", "rust_version": "1.88", "publish": null},
            {"name": "shedlock-memory", "rust_version": "1.85", "publish": null},
            {"name": "xtask", "rust_version": "1.85", "publish": []},
        ]});
        let g = groups(&meta).unwrap();
        assert_eq!(g["1.85"], ["shedlock", "shedlock-memory"]);
        assert_eq!(g["1.88"], ["shedlock-redis"]);
        assert_eq!(g.len(), 2);
        let missing = json!({"packages": [{"name": "x", "publish": null}]});
        assert!(groups(&missing).unwrap_err().contains("rust-version"));
    }
}
