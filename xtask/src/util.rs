//! Shared helpers: paths, cargo, signals, argument parsing.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use serde_json::Value;
use shedlock_launcher::Via;

/// The workspace root (the parent of this crate).
pub fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or_else(|| here.to_path_buf())
}

/// cargo's target dir: `$CARGO_TARGET_DIR`, else `<root>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() { d } else { root().join(d) }
        }
        None => root().join("target"),
    }
}

/// The cargo that runs us.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

/// Exit code of a finished child (128+signal when killed).
pub fn code_of(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(s)) => u8::try_from(128 + s).unwrap_or(1),
        _ => 1,
    }
}

/// Registers SIGINT/SIGTERM/SIGHUP so that they set the returned flag instead of killing us:
/// the children (cargo test) get Ctrl-C themselves, and we stop the services in order.
pub fn trap_signals() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in
        [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP]
    {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&flag)) {
            eprintln!(
                "xtask: cannot trap signal {sig}: {e} (the launcher's watchdog still cleans up)"
            );
        }
    }
    flag
}

/// True once a trapped signal arrived.
pub fn interrupted(flag: &AtomicBool) -> bool {
    flag.load(Ordering::SeqCst)
}

/// Pulls `--via <mode>` out of `args`.
pub fn take_via(args: &mut Vec<String>) -> Result<Option<Via>, String> {
    match take_value(args, "--via")? {
        Some(v) => v.parse::<Via>().map(Some).map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

/// Pulls `--name value` or `--name=value` out of `args`.
pub fn take_value(args: &mut Vec<String>, name: &str) -> Result<Option<String>, String> {
    let prefix = format!("{name}=");
    if let Some(i) = args.iter().position(|a| a.starts_with(&prefix)) {
        let a = args.remove(i);
        return Ok(Some(a[prefix.len()..].to_owned()));
    }
    if let Some(i) = args.iter().position(|a| a == name) {
        args.remove(i);
        if i < args.len() {
            return Ok(Some(args.remove(i)));
        }
        return Err(format!("{name} needs a value"));
    }
    Ok(None)
}

/// Pulls a boolean `--flag` out of `args`.
pub fn take_flag(args: &mut Vec<String>, name: &str) -> bool {
    match args.iter().position(|a| a == name) {
        Some(i) => {
            args.remove(i);
            true
        }
        None => false,
    }
}

/// A loud banner on stderr.
pub fn loud(msg: &str) {
    let bar = "!".repeat(78);
    eprintln!("\n{bar}\n{msg}\n{bar}\n");
}

/// `cargo metadata --no-deps` of the workspace, parsed.
pub fn metadata() -> Result<Value, String> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_flags_are_taken_out() {
        let mut a: Vec<String> =
            ["--via", "native", "x", "--url=u", "--all"].map(String::from).to_vec();
        assert_eq!(take_via(&mut a).unwrap(), Some(Via::Native));
        assert_eq!(take_value(&mut a, "--url").unwrap().as_deref(), Some("u"));
        assert!(take_flag(&mut a, "--all"));
        assert!(!take_flag(&mut a, "--all"));
        assert_eq!(a, ["x"]);
        let mut b = vec!["--via".to_owned()];
        assert!(take_via(&mut b).is_err());
        let mut c = vec!["--via".to_owned(), "boat".to_owned()];
        assert!(take_via(&mut c).is_err());
    }

    #[test]
    fn root_is_the_workspace() {
        assert!(root().join("Cargo.toml").is_file());
        assert!(root().join("xtask").is_dir());
    }
}
