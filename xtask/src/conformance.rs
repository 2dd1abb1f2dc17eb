//! `cargo xtask conformance`: runs the conformance kit against a provider, leaves its reports in
//! `<target dir>/conformance/`, prints a summary and fails unless every outcome was the expected
//! one. With `--record` it also copies the reports to `conformance/reports/` and regenerates the
//! README provider table: the only step that changes the checkout.

use std::{
    path::{Path, PathBuf},
    time::SystemTime,
};

use serde_json::Value;
use shedlock_launcher::Backend;

use crate::util::{
    cargo, code_of, interrupted, loud, root, take_flag, take_value, take_via, target_dir,
    trap_signals,
};

const TABLE_START: &str = "<!-- provider-table:start -->";
const TABLE_END: &str = "<!-- provider-table:end -->";

/// How to run one provider's conformance suite.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    /// The suite's name: the provider name of its report.
    name: String,
    krate: String,
    test: String,
    /// The harness filter selecting the suite in a binary of several (`redis-valkey::`).
    filter: Option<String>,
    backend: Option<Backend>,
    dir: PathBuf,
}

/// The crates with a conformance binary: the directories under `providers/` with a
/// `tests/conformance.rs`.
fn provider_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(root().join("providers"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("tests/conformance.rs").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    dirs.sort();
    dirs
}

/// The provider directory a suite name belongs to: the one it is, or starts with followed by
/// `-`; MariaDB's suites (`mariadb…`) are the `mysql` crate's.
pub(crate) fn dir_of(name: &str) -> Option<String> {
    let name = if let Some(rest) = name.strip_prefix("mariadb") {
        format!("mysql{rest}")
    } else {
        name.to_owned()
    };
    provider_dirs()
        .into_iter()
        .filter(|d| name == *d || name.starts_with(&format!("{d}-")))
        .max_by_key(String::len)
}

/// The backend a suite runs on: the one its whole name names (`redis-cluster`), else the one
/// after its first `-` (`redis-valkey`), else its first part (`mariadb-client-time`), else its
/// crate's.
pub(crate) fn backend_of(name: &str, dir: &str) -> Option<Backend> {
    let (head, tail) = name.split_once('-').unwrap_or((name, ""));
    Backend::from_name(name)
        .or_else(|| Backend::from_name(tail))
        .or_else(|| Backend::from_name(head))
        .or_else(|| Backend::from_name(dir))
}

/// The suites of a provider crate's conformance binary, as the binary lists them
/// (`<suite>::<check>` tests; builds the binary).
fn suites_in(krate: &str) -> Result<Vec<String>, String> {
    let out = cargo()
        .args(["test", "-q", "-p", krate, "--test", "conformance", "--", "--list"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("listing the suites of {krate} failed ({})", out.status));
    }
    let mut suites: Vec<String> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((suite, _)) = line.strip_suffix(": test").and_then(|t| t.split_once("::"))
            && !suites.iter().any(|s| s == suite)
        {
            suites.push(suite.to_owned());
        }
    }
    Ok(suites)
}

fn spec(name: &str) -> Result<Spec, String> {
    let name = match name.trim().to_ascii_lowercase().as_str() {
        "postgresql" => "postgres".to_owned(),
        "mysql" => "mariadb".to_owned(),
        other => other.to_owned(),
    };
    if name == "memory" {
        return Ok(Spec {
            krate: "shedlock-conformance".to_owned(),
            test: "memory".to_owned(),
            filter: None,
            backend: None,
            dir: root().join("conformance"),
            name,
        });
    }
    let Some(dir) = dir_of(&name) else {
        return Err(format!(
            "unknown provider {name:?}: the suites with a committed report (the README's table) \
             are {}; every suite of every provider crate is listed by `cargo xtask conformance \
             --list`",
            recorded_suites().join(", ")
        ));
    };
    let krate = format!("shedlock-{dir}");
    let suites = suites_in(&krate)?;
    if !suites.contains(&name) {
        return Err(format!(
            "unknown provider {name:?}: {krate}'s conformance suites are {}",
            suites.join(", ")
        ));
    }
    Ok(Spec {
        backend: backend_of(&name, &dir),
        filter: Some(format!("{name}::")),
        krate,
        test: "conformance".to_owned(),
        dir: root().join("providers").join(&dir),
        name,
    })
}

/// The suites with a committed report (`conformance/reports/<suite>.json`), sorted: the rows of
/// the README's provider table, known without building anything.
fn recorded_suites() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("conformance/reports"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let json = path.extension().is_some_and(|x| x == "json");
            json.then(|| path.file_stem()?.to_str().map(str::to_owned)).flatten()
        })
        .collect();
    names.sort();
    names
}

/// `sqlite` if that provider exists, else `memory`.
fn default_provider() -> &'static str {
    if root().join("providers/sqlite/Cargo.toml").is_file() { "sqlite" } else { "memory" }
}

/// memory, then every suite of every provider crate's conformance binary.
fn all_providers() -> Result<Vec<String>, String> {
    let mut names = vec!["memory".to_owned()];
    for dir in provider_dirs() {
        names.extend(suites_in(&format!("shedlock-{dir}"))?);
    }
    Ok(names)
}

/// `conformance [--provider <name> | --all | --list] [--via ...] [--url URL] [--record]`
pub fn run(args: &[String]) -> Result<u8, String> {
    let mut args = args.to_vec();
    let via = take_via(&mut args)?;
    let url = take_value(&mut args, "--url")?;
    let provider = take_value(&mut args, "--provider")?;
    let all = take_flag(&mut args, "--all");
    let record = take_flag(&mut args, "--record");
    let list = take_flag(&mut args, "--list");
    let secure = take_flag(&mut args, "--secure");
    let soak = take_value(&mut args, "--soak")?
        .map(|m| match m.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(m.trim().to_owned()),
            _ => Err(format!("--soak takes a positive number of minutes, not {m:?}")),
        })
        .transpose()?;
    if let Some(a) = args.first() {
        return Err(format!("unexpected argument {a:?}"));
    }
    if list {
        for name in all_providers()? {
            println!("{name}");
        }
        return Ok(0);
    }
    let providers = match (all, provider) {
        (true, Some(_)) => return Err("--all and --provider exclude each other".to_owned()),
        (true, None) if secure => {
            all_providers()?.into_iter().filter(|p| p.ends_with(SECURE_SUFFIX)).collect()
        }
        (true, None) => all_providers()?,
        (false, Some(p)) if secure => vec![secure_suite(&p)],
        (false, Some(p)) => vec![p],
        (false, None) if secure => {
            return Err("--secure needs --provider X (runs X-secure) or --all".to_owned());
        }
        (false, None) => vec![default_provider().to_owned()],
    };
    if secure && url.is_some() {
        return Err("--secure starts its own secure server: it takes no --url".to_owned());
    }
    if url.is_some() && providers.len() != 1 {
        return Err("--url needs exactly one provider".to_owned());
    }
    let flag = trap_signals();
    let mut code = 0u8;
    let mut recorded = 0usize;
    for p in &providers {
        if interrupted(&flag) {
            code = code.max(130);
            break;
        }
        let run = run_one(&spec(p)?, via, url.as_deref(), soak.as_deref())?;
        code = code.max(run.code);
        if record {
            recorded += record_reports(p, &run, soak.is_some())?;
        }
    }
    if record {
        if recorded == 0 {
            loud("--record: nothing recorded (no run was as expected)");
        } else if soak.is_some() {
            eprintln!(
                "xtask: soak reports recorded in conformance/reports/soak/ (not in the table)"
            );
        } else {
            match regenerate_readme() {
                Ok(n) => eprintln!("xtask: README provider table regenerated from {n} report(s)"),
                Err(e) => {
                    loud(&format!("README provider table NOT regenerated: {e}"));
                    code = code.max(1);
                }
            }
        }
    } else {
        eprintln!(
            "xtask: reports left in {} (add --record to copy them to conformance/reports/ and \
             regenerate the README provider table)",
            conf_dir().display()
        );
    }
    Ok(code)
}

/// The suffix of a provider's secure suite (`postgres-secure`): its main mode against a server
/// that requires TLS and authentication, as a user with only the documented grants.
const SECURE_SUFFIX: &str = "-secure";

/// The secure suite of `provider` (`postgres` → `postgres-secure`; a name that already is one
/// is kept).
fn secure_suite(provider: &str) -> String {
    let p = provider.trim().to_ascii_lowercase();
    let p = match p.as_str() {
        "postgresql" => "postgres".to_owned(),
        "mysql" => "mariadb".to_owned(),
        _ => p,
    };
    if p.ends_with(SECURE_SUFFIX) { p } else { format!("{p}{SECURE_SUFFIX}") }
}

/// Where the harness writes the reports: `<target dir>/conformance`.
fn conf_dir() -> PathBuf {
    target_dir().join("conformance")
}

/// One provider's run: its exit code and the reports it wrote.
struct ProviderRun {
    /// 0 only if the tests passed, a report was written and every outcome in it was expected.
    code: u8,
    /// The `.md`/`.json` reports written by this run, in `<target dir>/conformance`.
    reports: Vec<PathBuf>,
}

fn run_one(
    spec: &Spec,
    via: Option<shedlock_launcher::Via>,
    url: Option<&str>,
    soak_minutes: Option<&str>,
) -> Result<ProviderRun, String> {
    if !spec.dir.join("Cargo.toml").is_file() {
        return Err(format!(
            "provider {:?}: no crate {} at {} in this workspace",
            spec.name,
            spec.krate,
            spec.dir.display()
        ));
    }
    // With a URL the suite runs against that server (a server we do not own cannot be restarted,
    // so C25 is then "not applicable", which the provider's test expects exactly then). Without
    // one, the provider's test starts its own server through `shedlock_launcher::shared()` (in
    // the mode `SHEDLOCK_VIA` names), which it owns and can restart for C25.
    let mut env: Vec<(String, String)> = Vec::new();
    // A soak run: C15, C16 and C28 repeated for that many minutes (Options::from_env).
    if let Some(m) = soak_minutes {
        env.push(("SHEDLOCK_CONFORMANCE_SOAK_MINUTES".to_owned(), m.to_owned()));
    }
    match (spec.backend, url) {
        (Some(b), Some(u)) => env.push((b.env_var().to_owned(), u.to_owned())),
        (None, Some(u)) if spec.name == "sqlite" => {
            env.push((Backend::Sqlite.env_var().to_owned(), u.to_owned()))
        }
        (Some(b), None) => {
            if let Some(v) = via {
                env.push(("SHEDLOCK_VIA".to_owned(), v.to_string()));
            }
            // Install a missing server first (a fresh machine), then fail early, with the
            // install hint, when a native start still cannot work.
            if !matches!(via, Some(shedlock_launcher::Via::Docker)) {
                crate::provision::provision_backend(b);
                if let Err(e) = shedlock_launcher::check_installed(b)
                    && !matches!(via, None | Some(shedlock_launcher::Via::Auto))
                {
                    return Err(e.to_string());
                }
            }
            // The test process must not inherit a URL from `cargo xtask services up`.
            env.push((b.env_var().to_owned(), String::new()));
        }
        _ => {}
    }
    let conf_dir = conf_dir();
    std::fs::create_dir_all(&conf_dir)
        .map_err(|e| format!("creating {}: {e}", conf_dir.display()))?;
    let began = SystemTime::now();
    let mut cmd = cargo();
    cmd.args(["test", "-p", &spec.krate, "--test", &spec.test]);
    // The fault scenarios are `cargo xtask faults`' (each starts a cluster of its own).
    cmd.arg("--");
    if let Some(filter) = &spec.filter {
        cmd.arg(filter);
    }
    cmd.args(["--skip", "::faults::"]);
    cmd.env("SHEDLOCK_CONFORMANCE_DIR", &conf_dir).envs(env.iter().map(|(k, v)| (k, v)));
    eprintln!(
        "xtask: cargo test -p {} --test {} (SHEDLOCK_CONFORMANCE_DIR={})",
        spec.krate,
        spec.test,
        conf_dir.display()
    );
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;

    let reports = fresh_reports(&conf_dir, began, &spec.name)?;
    let mut code = if status.success() { 0 } else { code_of(status).max(1) };
    if reports.is_empty() {
        loud(&format!(
            "{}: NO CONFORMANCE REPORT was written to {}",
            spec.name,
            conf_dir.display()
        ));
        code = code.max(1);
    }
    for json in reports.iter().filter(|p| p.extension().is_some_and(|e| e == "json")) {
        let report = read_json(json)?;
        eprintln!("xtask: {}", summary(&report, json));
        let bad = not_as_expected(&report);
        if !bad.is_empty() {
            loud(&format!(
                "{}: {} check(s) NOT AS EXPECTED:\n{}",
                provider_name(&report),
                bad.len(),
                bad.join("\n")
            ));
            code = code.max(1);
        }
    }
    Ok(ProviderRun { code, reports })
}

/// The `.md`/`.json` reports of suite `suite` (or of its soak run, `<suite>-soak`) in `dir`
/// written since `since`. Another suite's report written there meanwhile (another run sharing
/// the target dir) is not this run's.
fn fresh_reports(dir: &Path, since: SystemTime, suite: &str) -> Result<Vec<PathBuf>, String> {
    let mut fresh = Vec::new();
    for entry in
        std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?.flatten()
    {
        let path = entry.path();
        let new = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since);
        let report = path.extension().is_some_and(|e| e == "md" || e == "json");
        let ours = path
            .file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s == suite || s.strip_suffix("-soak") == Some(suite));
        if new && report && ours {
            fresh.push(path);
        }
    }
    fresh.sort();
    Ok(fresh)
}

/// `--record`: copies a run's reports into `conformance/reports/`, but only those of a run that
/// was as expected (a report with a failure is not a baseline). Returns how many JSON reports
/// were recorded.
fn record_reports(provider: &str, run: &ProviderRun, soak: bool) -> Result<usize, String> {
    if run.code != 0 {
        loud(&format!("{provider}: the run was not as expected: its reports are NOT recorded"));
        return Ok(0);
    }
    let to = root().join(if soak { "conformance/reports/soak" } else { "conformance/reports" });
    std::fs::create_dir_all(&to).map_err(|e| format!("creating {}: {e}", to.display()))?;
    let mut json = 0;
    for path in &run.reports {
        let Some(name) = path.file_name() else { continue };
        let dest = to.join(name);
        std::fs::copy(path, &dest).map_err(|e| format!("copying {}: {e}", path.display()))?;
        eprintln!("xtask: recorded {}", dest.display());
        if path.extension().is_some_and(|e| e == "json") {
            json += 1;
        }
    }
    Ok(json)
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn results(report: &Value) -> impl Iterator<Item = &Value> {
    report.get("results").and_then(Value::as_array).into_iter().flatten()
}

fn provider_name(report: &Value) -> &str {
    report.get("provider").and_then(Value::as_str).unwrap_or("?")
}

/// The results whose outcome is not the expected one, one line each. A result is as expected
/// when the harness marked it so (`as_expected`); in a report without that field (written
/// before it existed) only passes are.
fn not_as_expected(report: &Value) -> Vec<String> {
    results(report)
        .filter(|r| match r.get("as_expected").and_then(Value::as_bool) {
            Some(ok) => !ok,
            None => r.get("outcome").and_then(Value::as_str) != Some("pass"),
        })
        .map(|r| {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("?").to_owned();
            let declared = match r.get("expected").filter(|e| !e.is_null()) {
                Some(e) => format!(
                    " [declared {}: {}]",
                    e.get("outcome").and_then(Value::as_str).unwrap_or("?"),
                    e.get("reason").and_then(Value::as_str).unwrap_or("")
                ),
                None => String::new(),
            };
            format!("{} {}: {}: {}{declared}", s("id"), s("name"), s("outcome"), s("detail"))
        })
        .collect()
}

/// One line for people: `sqlite: 25 pass, 2 n/a (2 expected) | acquire p50 175 µs, p99 274 µs,
/// round trips acquire/release —/— | <path>`.
fn summary(report: &Value, path: &Path) -> String {
    let fig = |k: &str| report.get("figures").and_then(|f| f.get(k));
    let mut s = format!(
        "{}: {} | acquire p50 {} µs, p99 {} µs, round trips acquire/release {}/{}",
        provider_name(report),
        outcomes(report),
        num(fig("acquire_p50_us")),
        num(fig("acquire_p99_us")),
        num(fig("round_trips_acquire")),
        num(fig("round_trips_release")),
    );
    if fig("skew_bound_ms").is_some_and(|v| !v.is_null()) {
        s.push_str(&format!(", skew bound {} ms", num(fig("skew_bound_ms"))));
    }
    s.push_str(&format!(" | {}", path.display()));
    s
}

/// `27 pass`, `25 pass, 2 n/a (2 expected)`, `20 pass, 1 FAIL, 6 unsupported, 7 NOT AS
/// EXPECTED`: every outcome that occurs, how many non-passes were declared as expected, and how
/// many results were not as expected.
fn outcomes(report: &Value) -> String {
    let count = |o: &str| {
        results(report).filter(|r| r.get("outcome").and_then(Value::as_str) == Some(o)).count()
    };
    let parts: Vec<String> = [
        ("pass", "pass"),
        ("fail", "FAIL"),
        ("unsupported", "unsupported"),
        ("not_applicable", "n/a"),
    ]
    .iter()
    .filter_map(|(key, label)| match count(key) {
        0 => None,
        n => Some(format!("{n} {label}")),
    })
    .collect();
    if parts.is_empty() {
        return "no checks".to_owned();
    }
    let mut s = parts.join(", ");
    let expected = results(report)
        .filter(|r| r.get("outcome").and_then(Value::as_str) != Some("pass"))
        .filter(|r| r.get("as_expected").and_then(Value::as_bool) == Some(true))
        .count();
    if expected > 0 {
        s.push_str(&format!(" ({expected} expected)"));
    }
    // Only what the harness marked (an older report has no `as_expected`: nothing is said).
    let unexpected = results(report)
        .filter(|r| r.get("as_expected").and_then(Value::as_bool) == Some(false))
        .count();
    if unexpected > 0 {
        s.push_str(&format!(", {unexpected} NOT AS EXPECTED"));
    }
    s
}

fn yes_no(v: Option<&Value>) -> &'static str {
    match v.and_then(Value::as_bool) {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    }
}

fn num(v: Option<&Value>) -> String {
    match v.and_then(Value::as_f64) {
        Some(x) if x.fract() == 0.0 => format!("{x:.0}"),
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.1}"),
        None => "—".to_owned(),
    }
}

/// The "partition / pause" cell of `provider`: each fault scenario its suite ran
/// (`conformance/reports/faults/*.json`), with its overlaps and acquisitions checked.
fn faults_cell(provider: &str, faults: &[Value]) -> String {
    let mut cells: Vec<String> = faults
        .iter()
        .filter(|f| f.get("suite").and_then(Value::as_str) == Some(provider))
        .map(|f| {
            let overlaps = f.get("overlaps").and_then(Value::as_array).map_or(0, Vec::len);
            let mins = f.get("seconds").and_then(Value::as_f64).unwrap_or(0.0) / 60.0;
            let mitigated =
                if f.get("mitigation").is_some_and(|m| !m.is_null()) { ", mitigated" } else { "" };
            format!(
                "{}{mitigated}: {} overlap{} in {} acquisitions ({mins:.0} min)",
                f.get("scenario").and_then(Value::as_str).unwrap_or("?"),
                overlaps,
                if overlaps == 1 { "" } else { "s" },
                f.get("acquisitions").and_then(Value::as_u64).unwrap_or(0),
            )
        })
        .collect();
    cells.sort();
    if cells.is_empty() { "—".to_owned() } else { cells.join("<br>") }
}

/// The Markdown table for a set of reports (and the fault scenarios' reports).
fn table(reports: &[Value], faults: &[Value]) -> String {
    let mut rows: Vec<&Value> = reports.iter().collect();
    rows.sort_by_key(|r| r.get("provider").and_then(Value::as_str).unwrap_or_default().to_owned());
    let mut out = String::from(
        "| provider | server time | extend | fencing | owner-checked | granularity | checks | acquire p50 µs | p99 µs | round trips acquire/release | skew bound ms | partition / pause |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let caps = r.get("capabilities");
        let cap = |k: &str| caps.and_then(|c| c.get(k));
        let fig = |k: &str| r.get("figures").and_then(|f| f.get(k));
        let granularity = match cap("granularity_ms").and_then(Value::as_u64) {
            Some(ms) => format!("{ms} ms"),
            None => "?".to_owned(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} | {} |\n",
            r.get("provider").and_then(Value::as_str).unwrap_or("?"),
            yes_no(cap("server_time")),
            yes_no(cap("extend")),
            yes_no(cap("fencing")),
            yes_no(cap("owner_checked")),
            granularity,
            outcomes(r),
            num(fig("acquire_p50_us")),
            num(fig("acquire_p99_us")),
            num(fig("round_trips_acquire")),
            num(fig("round_trips_release")),
            num(fig("skew_bound_ms")),
            faults_cell(r.get("provider").and_then(Value::as_str).unwrap_or("?"), faults),
        ));
    }
    out
}

/// Replaces the text between the markers in `readme` with `table`.
fn splice(readme: &str, table: &str) -> Result<String, String> {
    let start = readme.find(TABLE_START).ok_or(format!("marker {TABLE_START} not found"))?;
    let end = readme.find(TABLE_END).ok_or(format!("marker {TABLE_END} not found"))?;
    if end < start {
        return Err("the provider-table markers are out of order".to_owned());
    }
    Ok(format!("{}{TABLE_START}\n{table}{}", &readme[..start], &readme[end..]))
}

/// Regenerates the README table from every JSON report in `conformance/reports/` (and
/// `conformance/reports/faults/`); the number of provider rows.
pub(crate) fn regenerate_readme_table() -> Result<usize, String> {
    regenerate_readme()
}

/// Regenerates the README table from every JSON report in `conformance/reports/`.
fn regenerate_readme() -> Result<usize, String> {
    let dir = root().join("conformance/reports");
    let mut reports = Vec::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "json") {
            reports.push(read_json(&e.path())?);
        }
    }
    let mut faults = Vec::new();
    for e in std::fs::read_dir(dir.join("faults")).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "json") {
            faults.push(read_json(&e.path())?);
        }
    }
    let readme_path = root().join("README.md");
    let readme = std::fs::read_to_string(&readme_path)
        .map_err(|e| format!("reading {}: {e}", readme_path.display()))?;
    let updated = splice(&readme, &table(&reports, &faults))?;
    if updated != readme {
        std::fs::write(&readme_path, updated)
            .map_err(|e| format!("writing {}: {e}", readme_path.display()))?;
    }
    Ok(reports.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(provider: &str, outcomes: &[&str]) -> Value {
        json!({
            "provider": provider,
            "capabilities": {"extend": true, "fencing": false, "server_time": true, "owner_checked": true, "granularity_ms": 1, "max_name_len": 255},
            "results": outcomes.iter().enumerate().map(|(i, o)| json!({"id": format!("C{:02}", i + 1), "name": "x", "outcome": o, "detail": "", "duration_ms": 1})).collect::<Vec<_>>(),
            "figures": {"acquire_p50_us": 312.4, "acquire_p99_us": 1200.0, "round_trips_acquire": 1.0, "round_trips_release": null, "skew_bound_ms": null}
        })
    }

    #[test]
    fn the_table_has_one_sorted_row_per_report() {
        let faults = [json!({
            "scenario": "postgres", "suite": "postgres", "seconds": 600.0, "acquisitions": 4100,
            "overlaps": [], "mitigation": null
        })];
        let t = table(
            &[
                report("postgres", &["pass", "fail", "unsupported", "not_applicable", "pass"]),
                report("memory", &["pass"]),
            ],
            &faults,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].starts_with("| memory |") && lines[2].ends_with("| — |"), "{t}");
        assert_eq!(
            lines[3],
            "| postgres | yes | yes | no | yes | 1 ms | 2 pass, 1 FAIL, 1 unsupported, 1 n/a | 312 | 1200 | 1/— | — | postgres: 0 overlaps in 4100 acquisitions (10 min) |"
        );
        assert!(lines[2].contains("| 1 pass |"), "{t}");
    }

    /// A report written by the harness: `(outcome, declared outcome, as_expected)` per check.
    fn marked(provider: &str, results: &[(&str, Option<&str>, bool)]) -> Value {
        let mut r = report(provider, &[]);
        r["results"] = results
            .iter()
            .enumerate()
            .map(|(i, (o, declared, ok))| {
                json!({"id": format!("C{:02}", i + 1), "name": "x", "outcome": o, "detail": "d",
                       "duration_ms": 1,
                       "expected": declared.map(|d| json!({"outcome": d, "reason": "why"})),
                       "as_expected": ok})
            })
            .collect();
        r
    }

    #[test]
    fn only_results_marked_as_expected_pass_the_gate() {
        let ok = marked(
            "sqlite",
            &[("pass", None, true), ("not_applicable", Some("not_applicable"), true)],
        );
        assert!(not_as_expected(&ok).is_empty());
        assert_eq!(outcomes(&ok), "1 pass, 1 n/a (1 expected)");

        let bad = marked(
            "sqlite",
            &[
                ("not_applicable", None, false),
                ("pass", Some("not_applicable"), false),
                ("fail", None, false),
                ("unsupported", Some("unsupported"), true),
            ],
        );
        let lines = not_as_expected(&bad);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0], "C01 x: not_applicable: d");
        assert_eq!(lines[1], "C02 x: pass: d [declared not_applicable: why]");
        assert_eq!(
            outcomes(&bad),
            "1 pass, 1 FAIL, 1 unsupported, 1 n/a (1 expected), 3 NOT AS EXPECTED"
        );
    }

    #[test]
    fn a_report_without_the_mark_passes_the_gate_only_with_passes() {
        // Written before `as_expected` existed: a non-pass cannot be told expected.
        let old = report("memory", &["pass", "not_applicable", "fail"]);
        assert_eq!(not_as_expected(&old).len(), 2);
        assert_eq!(not_as_expected(&report("memory", &["pass"])), Vec::<String>::new());
        // ...but the README table says nothing it cannot know.
        assert_eq!(outcomes(&old), "1 pass, 1 FAIL, 1 n/a");
    }

    #[test]
    fn the_summary_is_for_people() {
        let mut r = marked("sqlite", &[("pass", None, true)]);
        r["figures"]["acquire_p50_us"] = json!(199.08);
        let line = summary(&r, Path::new("/t/conformance/sqlite.json"));
        assert_eq!(
            line,
            "sqlite: 1 pass | acquire p50 199 µs, p99 1200 µs, round trips acquire/release 1/— \
             | /t/conformance/sqlite.json"
        );
        assert!(!line.contains("Some("));
        r["figures"]["skew_bound_ms"] = json!(15.0);
        assert!(summary(&r, Path::new("x")).contains(", skew bound 15 ms |"));
    }

    #[test]
    fn reports_go_to_the_target_dir_not_the_checkout() {
        assert_eq!(conf_dir(), target_dir().join("conformance"));
        assert!(!conf_dir().starts_with(root().join("conformance")));
    }

    #[test]
    fn a_run_takes_only_its_own_suites_fresh_reports() {
        let dir = std::env::temp_dir().join(format!("xtask-fresh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let since = SystemTime::now() - std::time::Duration::from_secs(1);
        for f in [
            "mariadb-secure.json",
            "mariadb-secure.md",
            "mariadb-secure-soak.json",
            "etcd-secure.json",
            "mariadb.json",
        ] {
            std::fs::write(dir.join(f), "{}").unwrap();
        }
        let names: Vec<String> = fresh_reports(&dir, since, "mariadb-secure")
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["mariadb-secure-soak.json", "mariadb-secure.json", "mariadb-secure.md"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn splicing_replaces_only_between_the_markers() {
        let readme = format!("# x\n{TABLE_START}\nold\n{TABLE_END}\ntail\n");
        let out = splice(&readme, "| new |\n").unwrap();
        assert_eq!(out, format!("# x\n{TABLE_START}\n| new |\n{TABLE_END}\ntail\n"));
        assert_eq!(splice(&out, "| new |\n").unwrap(), out, "idempotent");
        assert!(splice("no markers", "t").is_err());
    }

    #[test]
    fn secure_names_the_secure_suite_of_a_provider() {
        assert_eq!(secure_suite("postgres"), "postgres-secure");
        assert_eq!(secure_suite("PostgreSQL"), "postgres-secure");
        assert_eq!(secure_suite("mysql"), "mariadb-secure");
        assert_eq!(secure_suite("redis-secure"), "redis-secure");
    }

    #[test]
    fn suites_map_to_crates_and_backends() {
        assert_eq!(dir_of("mariadb-client-time").as_deref(), Some("mysql"));
        assert_eq!(dir_of("mariadb").as_deref(), Some("mysql"));
        assert_eq!(dir_of("redis-valkey").as_deref(), Some("redis"));
        assert_eq!(dir_of("postgres-shedlock-compat").as_deref(), Some("postgres"));
        assert_eq!(dir_of("oracle"), None);
        assert_eq!(dir_of("redisx"), None, "a crate name is followed by `-` or nothing");
        assert_eq!(backend_of("redis-cluster", "redis"), Some(Backend::RedisCluster));
        assert_eq!(backend_of("redis-valkey", "redis"), Some(Backend::Valkey));
        assert_eq!(backend_of("redis-shedlock-compat", "redis"), Some(Backend::Redis));
        assert_eq!(backend_of("mariadb-mysql-flavor", "mysql"), Some(Backend::MariaDb));
        assert_eq!(backend_of("zookeeper-ensemble", "zookeeper"), Some(Backend::ZooKeeperEnsemble));
        assert_eq!(backend_of("nats-client-time", "nats"), Some(Backend::Nats));
        let memory = spec("memory").unwrap();
        assert_eq!(
            (memory.krate.as_str(), memory.test.as_str()),
            ("shedlock-conformance", "memory")
        );
        assert_eq!(memory.filter, None);
        let err = spec("oracle").unwrap_err();
        // The README's row names, variants included, without building anything.
        for row in ["memory", "postgres-client-time", "mariadb-mysql-flavor", "sqlite-client-time"]
        {
            assert!(err.contains(&format!(" {row},")), "{row} not listed: {err}");
        }
    }
}
