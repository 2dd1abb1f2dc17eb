//! `cargo xtask package [--no-verify]`: proves that every crate meant for crates.io can be
//! published, whatever the workspace's layout.
//!
//! The crates are the workspace members whose `publish` is not `false`, read from
//! `cargo metadata`. Three layers, each catching what the next would report late or obscurely:
//!
//! 1. Manifest rules, from the metadata: description, license and readme are set; no dependency
//!    of a published crate that survives packaging (a normal or build dependency, or a
//!    dev-dependency with a version; cargo strips path-only dev-dependencies) points at a
//!    `publish = false` member; those surviving dependencies between published crates form no
//!    cycle (cargo cannot order a cycle, nor can crates.io publish its first release).
//! 2. `cargo package --allow-dirty -p <each>` over the whole set at once (cargo resolves their
//!    dependencies on each other through a local overlay of the freshly packaged ones), which
//!    by default also builds every packaged crate on its own (`--no-verify` skips that). The
//!    builds go to `<target>/package-verify`, and what earlier runs left of our crates (their
//!    unpacked copies in cargo's registry cache, their builds there) is removed first: cargo
//!    reuses a registry crate's copy and build by name and version, and ours change under the
//!    same version.
//! 3. The `.crate` files themselves: each holds the root's `LICENSE*` files and its readme, and
//!    its normalized `Cargo.toml` names no `publish = false` member.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use serde_json::Value;

use crate::util::{cargo, code_of, metadata, root, take_flag};

/// A workspace member, as far as packaging cares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    name: String,
    version: String,
    publishable: bool,
    readme: Option<String>,
}

/// What the manifest rules conclude: the members and the problems found.
#[derive(Debug, Default)]
struct Plan {
    members: Vec<Member>,
    problems: Vec<String>,
}

impl Plan {
    fn publishable(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.publishable)
    }

    fn unpublished(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| !m.publishable)
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.trim().is_empty())
}

/// `publish` in cargo metadata: `null` (anywhere), `[]` (`publish = false`) or a registry list.
pub(crate) fn is_publishable(package: &Value) -> bool {
    match package.get("publish") {
        None | Some(Value::Null) => true,
        Some(Value::Array(list)) => !list.is_empty(),
        Some(_) => false,
    }
}

/// Removes the builds of the published crates (fingerprints, libraries, build scripts) from
/// the verification target directory `target`, keeping every other crate's.
fn forget_builds(target: &Path, published: &[&Member]) {
    for profile in ["debug", "release"] {
        for kind in [".fingerprint", "deps", "build"] {
            let Ok(entries) = std::fs::read_dir(target.join(profile).join(kind)) else { continue };
            for entry in entries.flatten() {
                let file = entry.file_name().to_string_lossy().into_owned();
                let ours = published.iter().any(|m| {
                    let stem = m.name.replace('-', "_");
                    [format!("{}-", m.name), format!("lib{stem}-"), format!("{stem}-")]
                        .iter()
                        // `<name>-<hash>`: a longer crate name (`shedlock-sql-<hash>` for
                        // `shedlock`) leaves a `-` in the rest.
                        .any(|prefix| {
                            file.strip_prefix(prefix.as_str())
                                .is_some_and(|rest| !rest.contains('-'))
                        })
                });
                if ours {
                    let path = entry.path();
                    let _ = if path.is_dir() {
                        std::fs::remove_dir_all(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                }
            }
        }
    }
}

/// Cargo's home: `$CARGO_HOME`, else `~/.cargo`.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// Removes what earlier `cargo package` runs left of the published crates in cargo's registry
/// cache: `registry/src/<index>/<name>-<version>/` and `registry/cache/<index>/<name>-<version>.crate`.
///
/// Verification resolves the crates on each other through a local registry that stands in for
/// crates.io, and cargo unpacks each `.crate` into `registry/src/`, keyed by name and version
/// only. A directory unpacked by an earlier run (with the same version but older sources) is
/// reused as it is: a provider is then built against the old `shedlock` and fails on any API
/// added since (seen on CI, whose cargo home outlives its checkouts). None of our crates comes
/// from crates.io, so nothing else uses these copies; cargo unpacks them again when needed.
/// Returns how many entries it removed.
fn forget_extracted_copies(published: &[&Member]) -> usize {
    let Some(home) = cargo_home() else { return 0 };
    let mut removed = 0;
    for (kind, suffix) in [("src", ""), ("cache", ".crate")] {
        let Ok(indexes) = std::fs::read_dir(home.join("registry").join(kind)) else { continue };
        for index in indexes.flatten() {
            for m in published {
                let entry = index.path().join(format!("{}-{}{suffix}", m.name, m.version));
                let gone = if entry.is_dir() {
                    std::fs::remove_dir_all(&entry).is_ok()
                } else {
                    entry.is_file() && std::fs::remove_file(&entry).is_ok()
                };
                removed += usize::from(gone);
            }
        }
    }
    removed
}

/// Applies the manifest rules to `cargo metadata --no-deps` output.
fn plan(metadata: &Value) -> Plan {
    let packages: Vec<&Value> =
        metadata.get("packages").and_then(Value::as_array).into_iter().flatten().collect();
    let members: Vec<Member> = packages
        .iter()
        .map(|p| Member {
            name: str_of(p, "name").unwrap_or_default().to_owned(),
            version: str_of(p, "version").unwrap_or_default().to_owned(),
            publishable: is_publishable(p),
            readme: str_of(p, "readme").map(str::to_owned),
        })
        .collect();
    let publishable: BTreeSet<&str> =
        members.iter().filter(|m| m.publishable).map(|m| m.name.as_str()).collect();
    let unpublished: BTreeSet<&str> =
        members.iter().filter(|m| !m.publishable).map(|m| m.name.as_str()).collect();

    let mut problems = Vec::new();
    // Edges among published crates that stay in the packaged manifests.
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in packages.iter().filter(|p| is_publishable(p)) {
        let name = str_of(p, "name").unwrap_or_default();
        for field in ["description", "license"] {
            if str_of(p, field).is_none()
                && !(field == "license" && str_of(p, "license_file").is_some())
            {
                problems.push(format!("{name}: no `{field}` (crates.io requires it)"));
            }
        }
        if str_of(p, "readme").is_none() {
            problems.push(format!("{name}: no `readme` (every published crate carries one)"));
        }
        for d in p.get("dependencies").and_then(Value::as_array).into_iter().flatten() {
            if str_of(d, "path").is_none() {
                continue; // from a registry or git: not a workspace member
            }
            let dep = str_of(d, "name").unwrap_or_default();
            let kind = str_of(d, "kind").unwrap_or("normal");
            // A path dependency without `version` shows up as "*".
            let versioned = str_of(d, "req").is_some_and(|r| r != "*");
            let target = str_of(d, "target").map(|t| format!(" (target {t})")).unwrap_or_default();
            let survives = kind != "dev" || versioned;
            if unpublished.contains(dep) {
                if kind != "dev" {
                    let optional = if d.get("optional") == Some(&Value::Bool(true)) {
                        "optional "
                    } else {
                        ""
                    };
                    problems.push(format!(
                        "{name}: {optional}{kind} dependency{target} on `{dep}`, which is publish = false: \
                         {name} can never be published; move what needs it into a publish = false \
                         crate (a dev-dependency of {name} at most)"
                    ));
                } else if versioned {
                    problems.push(format!(
                        "{name}: versioned dev-dependency{target} on `{dep}`, which is publish = \
                         false: cargo keeps it in the packaged manifest, where it cannot resolve; \
                         depend on it by path only (cargo then strips it)"
                    ));
                }
            } else if publishable.contains(dep) {
                if kind != "dev" && !versioned {
                    problems.push(format!(
                        "{name}: {kind} dependency{target} on `{dep}` has a path but no version"
                    ));
                }
                if survives {
                    edges.entry(name).or_default().insert(dep);
                }
            }
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        problems.push(format!(
            "dependency cycle among published crates (counting versioned dev-dependencies): {}; \
             neither can be published first: make the dev-dependency in it path-only",
            cycle.join(" -> ")
        ));
    }
    Plan { members, problems }
}

/// A cycle in `edges`, as the path that closes it, if there is one.
fn find_cycle<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Option<Vec<&'a str>> {
    fn visit<'a>(
        node: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(i) = stack.iter().position(|n| *n == node) {
            let mut cycle = stack[i..].to_vec();
            cycle.push(node);
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node);
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

/// Checks one `.crate` file's contents (`files`: its paths without the `name-version/` prefix;
/// `manifest`: its normalized `Cargo.toml`).
fn check_contents(
    member: &Member,
    files: &BTreeSet<String>,
    manifest: &str,
    licenses: &[String],
    unpublished: &[&str],
) -> Vec<String> {
    let mut problems = Vec::new();
    let name = &member.name;
    for l in licenses {
        if !files.contains(l) {
            problems.push(format!(
                "{name}: the package lacks {l} (link it into the crate: `ln -s <path to root>/{l}`)"
            ));
        }
    }
    if let Some(readme) = &member.readme {
        let file = Path::new(readme).file_name().map(|f| f.to_string_lossy().into_owned());
        if !file.as_ref().is_some_and(|f| files.contains(f)) {
            problems.push(format!("{name}: the package lacks its readme {readme}"));
        }
    }
    for u in unpublished {
        if manifest.contains(&format!("dependencies.{u}]"))
            || manifest.contains(&format!("package = \"{u}\""))
        {
            problems.push(format!(
                "{name}: the packaged Cargo.toml still depends on `{u}`, which is publish = false"
            ));
        }
    }
    problems
}

/// `tar` over a `.crate`: its file list (without the top directory) and its `Cargo.toml`.
fn read_crate(file: &Path, top: &str) -> Result<(BTreeSet<String>, String), String> {
    let out = Command::new("tar")
        .arg("-tzf")
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tar -tzf {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let prefix = format!("{top}/");
    let files = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
        .collect();
    let out = Command::new("tar")
        .arg("-xOzf")
        .arg(file)
        .arg(format!("{top}/Cargo.toml"))
        .output()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    if !out.status.success() {
        return Err(format!("{}: no Cargo.toml", file.display()));
    }
    Ok((files, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// The root's license files (`LICENSE`, `LICENSE-MIT`, ...): every package must carry them.
fn root_licenses() -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(root())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("LICENSE") || n.starts_with("COPYING"))
        .collect();
    found.sort();
    found
}

/// `cargo xtask package [--no-verify]`
pub fn run(args: &[String]) -> Result<u8, String> {
    let mut args = args.to_vec();
    let verify = !take_flag(&mut args, "--no-verify");
    if let Some(a) = args.first() {
        return Err(format!(
            "unexpected argument {a:?} (usage: cargo xtask package [--no-verify])"
        ));
    }
    let meta = metadata()?;
    let plan = plan(&meta);
    let published: Vec<&Member> = plan.publishable().collect();
    let unpublished: Vec<&str> = plan.unpublished().map(|m| m.name.as_str()).collect();
    eprintln!(
        "xtask: published crates (publish is not false): {}",
        published.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(" ")
    );
    eprintln!("xtask: not published: {}", unpublished.join(" "));
    if published.is_empty() {
        eprintln!("xtask: nothing to package");
        return Ok(0);
    }
    let mut problems = plan.problems.clone();
    for p in &problems {
        eprintln!("xtask: package: {p}");
    }

    if verify {
        let forgotten = forget_extracted_copies(&published);
        if forgotten > 0 {
            eprintln!(
                "xtask: removed {forgotten} copies of workspace crates that earlier package runs \
                 left in cargo's registry cache (the build would reuse their stale sources)"
            );
        }
    }

    // Packages are verified in a target directory of their own, where every build of a
    // workspace crate comes from the local registry: those builds are removed before each run
    // (cargo takes a registry crate's build as fresh whatever its sources, since a published
    // version never changes; ours change under the same version). Third-party builds stay.
    let target = meta
        .get("target_directory")
        .and_then(Value::as_str)
        .map(PathBuf::from)
        .ok_or("cargo metadata: no target_directory")?
        .join("package-verify");
    forget_builds(&target, &published);

    let mut cmd = cargo();
    cmd.env("CARGO_TARGET_DIR", &target);
    cmd.args(["package", "--allow-dirty"]);
    if !verify {
        cmd.arg("--no-verify");
    }
    for m in &published {
        cmd.args(["-p", &m.name]);
    }
    let shown: Vec<String> = std::iter::once("cargo".to_owned())
        .chain(cmd.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect();
    eprintln!("xtask: {}", shown.join(" "));
    let began = Instant::now();
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    let secs = began.elapsed().as_secs_f64();
    let mut code = 0;
    if status.success() {
        eprintln!(
            "xtask: cargo package {} {} crates in {secs:.0} s",
            if verify { "packaged and built" } else { "packaged (not built: --no-verify)" },
            published.len()
        );
        let dir = target.join("package");
        let licenses = root_licenses();
        for m in &published {
            let top = format!("{}-{}", m.name, m.version);
            let (files, manifest) = read_crate(&dir.join(format!("{top}.crate")), &top)?;
            problems.extend(check_contents(m, &files, &manifest, &licenses, &unpublished));
        }
        if problems.len() == plan.problems.len() {
            eprintln!(
                "xtask: every package holds {} and its readme, and depends on no unpublished crate",
                licenses.join(", ")
            );
        }
    } else {
        code = code_of(status).max(1);
        eprintln!("xtask: cargo package FAILED after {secs:.0} s");
    }
    if !problems.is_empty() {
        code = code.max(1);
        eprintln!("xtask: {} packaging problem(s):", problems.len());
        for p in &problems {
            eprintln!("  - {p}");
        }
    }
    if code == 0 {
        eprintln!("xtask: package: OK");
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dep(name: &str, kind: Option<&str>, req: &str) -> Value {
        json!({"name": name, "kind": kind, "req": req, "path": format!("/ws/{name}")})
    }

    fn pkg(name: &str, publish: Value, deps: Vec<Value>) -> Value {
        json!({
            "name": name, "version": "0.1.0", "publish": publish, "description": "d",
            "license": "MIT", "readme": "README.md", "dependencies": deps,
        })
    }

    fn problems(packages: Vec<Value>) -> Vec<String> {
        plan(&json!({ "packages": packages })).problems
    }

    #[test]
    fn path_only_dev_dependency_on_an_unpublished_crate_is_fine() {
        let p = problems(vec![
            pkg("core", Value::Null, vec![]),
            pkg(
                "prov",
                Value::Null,
                vec![dep("core", None, "^0.1.0"), dep("launcher", Some("dev"), "*")],
            ),
            pkg("launcher", json!([]), vec![]),
        ]);
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn versioned_dev_dependency_on_an_unpublished_crate_is_caught() {
        let p = problems(vec![
            pkg("prov", Value::Null, vec![dep("launcher", Some("dev"), "^0.1.0")]),
            pkg("launcher", json!([]), vec![]),
        ]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("versioned dev-dependency") && p[0].contains("launcher"), "{p:?}");
    }

    #[test]
    fn normal_dependency_on_an_unpublished_crate_is_caught_even_path_only() {
        let p = problems(vec![
            pkg("common", Value::Null, vec![dep("launcher", None, "*")]),
            pkg("launcher", json!([]), vec![]),
        ]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("can never be published"), "{p:?}");
    }

    #[test]
    fn a_versioned_dev_dependency_cycle_is_caught_and_a_path_only_one_is_not() {
        let cycle = problems(vec![
            pkg("core", Value::Null, vec![dep("memory", Some("dev"), "^0.1.0")]),
            pkg("memory", Value::Null, vec![dep("core", None, "^0.1.0")]),
        ]);
        assert_eq!(cycle.len(), 1, "{cycle:?}");
        assert!(cycle[0].contains("core -> memory -> core"), "{cycle:?}");
        let fine = problems(vec![
            pkg("core", Value::Null, vec![dep("memory", Some("dev"), "*")]),
            pkg("memory", Value::Null, vec![dep("core", None, "^0.1.0")]),
        ]);
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn missing_metadata_and_unversioned_normal_path_dependency_are_caught() {
        let mut bare = pkg("a", Value::Null, vec![dep("b", None, "*")]);
        bare["readme"] = Value::Null;
        bare["description"] = Value::Null;
        let p = problems(vec![bare, pkg("b", json!(["crates-io"]), vec![])]);
        assert_eq!(p.len(), 3, "{p:?}");
    }

    #[test]
    fn forgetting_builds_removes_only_the_published_crates_own() {
        let dir = std::env::temp_dir().join(format!("xtask-forget-{}", std::process::id()));
        let member = |name: &str| Member {
            name: name.into(),
            version: "0.1.0".into(),
            publishable: true,
            readme: None,
        };
        let (core, sql) = (member("shedlock"), member("shedlock-sql"));
        let files = [
            ("debug/.fingerprint/shedlock-0a1b", true),
            ("debug/.fingerprint/shedlock-sql-99ff", true),
            ("debug/deps/libshedlock-0a1b.rlib", true),
            ("debug/deps/libshedlock_sql-99ff.rmeta", true),
            ("debug/deps/shedlock-0a1b.d", true),
            ("debug/build/shedlock-sql-77aa", true),
            // Other crates' builds, kept.
            ("debug/.fingerprint/shedlock-duration-1234", false),
            ("debug/deps/libtokio-5678.rlib", false),
            ("debug/deps/libshedlock_duration-1234.rlib", false),
        ];
        for (f, _) in files {
            let path = dir.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            if f.contains(".fingerprint") || f.contains("/build/") {
                std::fs::create_dir_all(&path).unwrap();
            } else {
                std::fs::write(&path, b"x").unwrap();
            }
        }
        forget_builds(&dir, &[&core, &sql]);
        for (f, removed) in files {
            assert_eq!(!dir.join(f).exists(), removed, "{f}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn contents_need_licenses_readme_and_no_unpublished_names() {
        let m = Member {
            name: "core".into(),
            version: "0.1.0".into(),
            publishable: true,
            readme: Some("../README.md".into()),
        };
        let licenses = vec!["LICENSE-APACHE".to_owned(), "LICENSE-MIT".to_owned()];
        let all: BTreeSet<String> =
            ["Cargo.toml", "README.md", "LICENSE-APACHE", "LICENSE-MIT"].map(String::from).into();
        assert!(
            check_contents(&m, &all, "[dependencies.x]\n", &licenses, &["launcher"]).is_empty()
        );
        let few: BTreeSet<String> = ["Cargo.toml", "LICENSE-MIT"].map(String::from).into();
        let p = check_contents(
            &m,
            &few,
            "[dev-dependencies.launcher]\nversion = \"0.1\"\n",
            &licenses,
            &["launcher"],
        );
        assert_eq!(p.len(), 3, "{p:?}");
    }
}
