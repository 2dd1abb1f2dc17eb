//! Where the kit writes: [`report_dir`] (the reports, and the fault scenarios' under
//! `faults/`). A layer-1 module: it imports nothing from the crate.

use std::path::{Path, PathBuf};

/// Where reports go: `$SHEDLOCK_CONFORMANCE_DIR`, else `<target dir>/conformance`, where the
/// target dir is `$CARGO_TARGET_DIR`, else the `target/` directory of the workspace containing
/// `$CARGO_MANIFEST_DIR` (or the current directory), else the directory holding the running
/// test binary's profile directory.
pub fn report_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SHEDLOCK_CONFORMANCE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    target_dir().join("conformance")
}

fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok());
    if let Some(start) = start
        && let Some(root) = workspace_root(&start)
    {
        return root.join("target");
    }
    // <target>/<profile>/deps/<binary>
    if let Ok(exe) = std::env::current_exe()
        && let Some(t) = exe.parent().and_then(Path::parent).and_then(Path::parent)
    {
        return t.to_path_buf();
    }
    PathBuf::from("target")
}

/// The nearest directory at or above `start` whose `Cargo.toml` declares `[workspace]`; else
/// the nearest with a `Cargo.toml`.
fn workspace_root(start: &Path) -> Option<PathBuf> {
    let mut found_pkg = None;
    let mut cur = Some(start);
    while let Some(dir) = cur {
        if let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) {
            if text.lines().any(|l| l.trim() == "[workspace]") {
                return Some(dir.to_path_buf());
            }
            if found_pkg.is_none() {
                found_pkg = Some(dir.to_path_buf());
            }
        }
        cur = dir.parent();
    }
    found_pkg
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn workspace_root_is_the_nearest_workspace_manifest() {
        let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let root = workspace_root(&here).unwrap();
        let text = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(text.contains("[workspace]"));
        assert!(here.starts_with(&root));
    }
}
