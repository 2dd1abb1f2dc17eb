//! Outcomes and the report (Markdown and JSON).

use std::{
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use shedlock::Capabilities;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The provider behaved as required.
    Pass,
    /// The provider broke the requirement (the detail says how).
    Fail,
    /// The check needs a capability the provider does not declare.
    Unsupported,
    /// The check needs a hook the factory does not offer (the detail says which).
    NotApplicable,
}

impl Outcome {
    /// The JSON spelling: `pass`, `fail`, `unsupported`, `not_applicable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Unsupported => "unsupported",
            Outcome::NotApplicable => "not_applicable",
        }
    }

    /// The spelling for people: `pass`, `FAIL`, `unsupported`, `not applicable`.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "FAIL",
            Outcome::Unsupported => "unsupported",
            Outcome::NotApplicable => "not applicable",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What a check concluded, with a human explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The outcome.
    pub outcome: Outcome,
    /// Why (for a failure: what was expected and what happened; for a pass: what was measured).
    pub detail: String,
}

impl Verdict {
    /// A pass.
    pub fn pass(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Pass, detail: detail.into() }
    }

    /// A failure.
    pub fn fail(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Fail, detail: detail.into() }
    }

    /// Capability not declared.
    pub fn unsupported(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Unsupported, detail: detail.into() }
    }

    /// Hook not offered.
    pub fn not_applicable(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::NotApplicable, detail: detail.into() }
    }
}

/// The result of one check in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// The catalogue id, e.g. `C05`.
    pub id: &'static str,
    /// The check's name, e.g. `expires_after_at_most`.
    pub name: &'static str,
    /// The outcome.
    pub outcome: Outcome,
    /// Why.
    pub detail: String,
    /// How long the check took.
    pub duration: Duration,
}

impl CheckResult {
    /// The test name the harness uses: `C05_expires_after_at_most`.
    pub fn test_name(&self) -> String {
        format!("{}_{}", self.id, self.name)
    }
}

/// Measured figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Median latency of a successful `try_lock` on a free name, in microseconds.
    pub acquire_p50_us: Option<f64>,
    /// 99th percentile of the same.
    pub acquire_p99_us: Option<f64>,
    /// Client-to-server round trips per successful acquire, measured by the fault proxy; `None`
    /// when the factory offers no backend address.
    pub round_trips_acquire: Option<f64>,
    /// Round trips per release.
    pub round_trips_release: Option<f64>,
    /// Round trips the client started after its calls had returned (e.g. a connection pool
    /// checking a connection it got back), per acquire+release cycle. Shown in the Markdown
    /// report; not part of the JSON schema.
    pub round_trips_background: Option<f64>,
    /// For client-time providers: the largest injected skew at which no exclusion violation was
    /// seen (C18), in milliseconds. `None` for server-time providers or when C18 did not run.
    pub skew_bound_ms: Option<f64>,
}

/// A run's report: one result per check, the declared capabilities and the figures.
#[derive(Debug, Clone)]
pub struct Report {
    /// The provider's name.
    pub provider: String,
    /// The declared capabilities (from an instance).
    pub capabilities: Capabilities,
    /// One result per check that ran, in catalogue order.
    pub results: Vec<CheckResult>,
    /// The figures.
    pub figures: Figures,
}

#[derive(Serialize, Deserialize)]
struct JsonCaps {
    extend: bool,
    fencing: bool,
    server_time: bool,
    owner_checked: bool,
    granularity_ms: u64,
    max_name_len: Option<usize>,
}

#[derive(Serialize, Deserialize)]
struct JsonResult {
    id: String,
    name: String,
    outcome: Outcome,
    detail: String,
    duration_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct JsonFigures {
    acquire_p50_us: Option<f64>,
    acquire_p99_us: Option<f64>,
    round_trips_acquire: Option<f64>,
    round_trips_release: Option<f64>,
    skew_bound_ms: Option<f64>,
}

#[derive(Serialize, Deserialize)]
struct JsonReport {
    provider: String,
    capabilities: JsonCaps,
    results: Vec<JsonResult>,
    figures: JsonFigures,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Report {
    /// Whether no check failed.
    pub fn passed(&self) -> bool {
        self.results.iter().all(|r| r.outcome != Outcome::Fail)
    }

    /// The result of check `id` (e.g. `"C05"`), if it ran.
    pub fn result(&self, id: &str) -> Option<&CheckResult> {
        self.results.iter().find(|r| r.id == id)
    }

    /// The failed checks.
    pub fn failures(&self) -> Vec<&CheckResult> {
        self.results.iter().filter(|r| r.outcome == Outcome::Fail).collect()
    }

    /// The report as JSON, in the documented schema.
    pub fn to_json(&self) -> String {
        let c = &self.capabilities;
        let r = JsonReport {
            provider: self.provider.clone(),
            capabilities: JsonCaps {
                extend: c.extend,
                fencing: c.fencing,
                server_time: c.server_time,
                owner_checked: c.owner_checked,
                granularity_ms: ms(c.granularity),
                max_name_len: c.max_name_len,
            },
            results: self
                .results
                .iter()
                .map(|r| JsonResult {
                    id: r.id.to_owned(),
                    name: r.name.to_owned(),
                    outcome: r.outcome,
                    detail: r.detail.clone(),
                    duration_ms: ms(r.duration),
                })
                .collect(),
            figures: JsonFigures {
                acquire_p50_us: self.figures.acquire_p50_us,
                acquire_p99_us: self.figures.acquire_p99_us,
                round_trips_acquire: self.figures.round_trips_acquire,
                round_trips_release: self.figures.round_trips_release,
                skew_bound_ms: self.figures.skew_bound_ms,
            },
        };
        serde_json::to_string_pretty(&r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as Markdown: a title, the capabilities table, the results table, the figures.
    pub fn to_markdown(&self) -> String {
        let c = &self.capabilities;
        let yn = |b: bool| if b { "yes" } else { "no" };
        let mut s = format!("# Conformance report: {}\n\n", self.provider);
        s.push_str("## Capabilities\n\n| capability | declared |\n|---|---|\n");
        s.push_str(&format!("| extend | {} |\n", yn(c.extend)));
        s.push_str(&format!("| fencing | {} |\n", yn(c.fencing)));
        s.push_str(&format!("| server_time | {} |\n", yn(c.server_time)));
        s.push_str(&format!("| owner_checked | {} |\n", yn(c.owner_checked)));
        s.push_str(&format!("| granularity | {} ms |\n", ms(c.granularity)));
        s.push_str(&format!(
            "| max_name_len | {} |\n",
            c.max_name_len.map_or_else(|| "unlimited".to_owned(), |n| format!("{n} bytes"))
        ));
        let count = |o: Outcome| self.results.iter().filter(|r| r.outcome == o).count();
        s.push_str(&format!(
            "\n## Results\n\n{} pass, {} fail, {} unsupported, {} not applicable\n\n",
            count(Outcome::Pass),
            count(Outcome::Fail),
            count(Outcome::Unsupported),
            count(Outcome::NotApplicable)
        ));
        s.push_str("| id | check | outcome | detail | ms |\n|---|---|---|---|---|\n");
        for r in &self.results {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                r.id,
                r.name,
                r.outcome.label(),
                md_cell(&r.detail),
                ms(r.duration)
            ));
        }
        let f = &self.figures;
        let num = |v: Option<f64>, unit: &str| {
            v.map_or_else(|| "n/a".to_owned(), |v| format!("{} {unit}", round2(v)))
        };
        s.push_str("\n## Figures\n\n| figure | value |\n|---|---|\n");
        s.push_str(&format!("| acquire p50 | {} |\n", num(f.acquire_p50_us, "µs")));
        s.push_str(&format!("| acquire p99 | {} |\n", num(f.acquire_p99_us, "µs")));
        s.push_str(&format!("| round trips per acquire | {} |\n", num(f.round_trips_acquire, "")));
        s.push_str(&format!("| round trips per release | {} |\n", num(f.round_trips_release, "")));
        s.push_str(&format!(
            "| background round trips per acquire+release (after the calls returned) | {} |\n",
            num(f.round_trips_background, "")
        ));
        s.push_str(&format!("| skew bound | {} |\n", num(f.skew_bound_ms, "ms")));
        s
    }

    /// One line per check, then the capabilities and figures, for a terminal.
    pub fn to_text(&self) -> String {
        let c = &self.capabilities;
        let mut s = format!(
            "conformance report for {}: extend={} fencing={} server_time={} owner_checked={} \
             granularity={}ms max_name_len={:?}\n",
            self.provider,
            c.extend,
            c.fencing,
            c.server_time,
            c.owner_checked,
            ms(c.granularity),
            c.max_name_len
        );
        for r in &self.results {
            s.push_str(&format!(
                "  {:<4} {:<34} {:<14} {:>6} ms  {}\n",
                r.id,
                r.name,
                r.outcome.label(),
                ms(r.duration),
                r.detail
            ));
        }
        let f = &self.figures;
        s.push_str(&format!(
            "  figures: acquire p50={:?}us p99={:?}us round_trips acquire={:?} release={:?} skew_bound_ms={:?}\n",
            f.acquire_p50_us.map(round2),
            f.acquire_p99_us.map(round2),
            f.round_trips_acquire.map(round2),
            f.round_trips_release.map(round2),
            f.skew_bound_ms
        ));
        s
    }

    /// Writes `<dir>/<provider>.md` and `<dir>/<provider>.json`, creating `dir`. Returns the two
    /// paths.
    pub fn write_to(&self, dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let md = dir.join(format!("{}.md", self.provider));
        let json = dir.join(format!("{}.json", self.provider));
        std::fs::write(&md, self.to_markdown())?;
        std::fs::write(&json, self.to_json())?;
        Ok((md, json))
    }

    /// Writes the report to [`report_dir`].
    pub fn write(&self) -> std::io::Result<(PathBuf, PathBuf)> {
        self.write_to(&report_dir())
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

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
    if let Some(start) = start {
        if let Some(root) = workspace_root(&start) {
            return root.join("target");
        }
    }
    // <target>/<profile>/deps/<binary>
    if let Ok(exe) = std::env::current_exe() {
        if let Some(t) = exe.parent().and_then(Path::parent).and_then(Path::parent) {
            return t.to_path_buf();
        }
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
    use super::*;

    fn sample() -> Report {
        Report {
            provider: "p".into(),
            capabilities: Capabilities::new()
                .with_extend(true)
                .with_granularity(Duration::from_secs(1)),
            results: vec![
                CheckResult {
                    id: "C01",
                    name: "lock_is_held",
                    outcome: Outcome::Pass,
                    detail: "ok | fine\nreally".into(),
                    duration: Duration::from_millis(12),
                },
                CheckResult {
                    id: "C24",
                    name: "backend_unreachable",
                    outcome: Outcome::NotApplicable,
                    detail: "no address".into(),
                    duration: Duration::ZERO,
                },
            ],
            figures: Figures {
                acquire_p50_us: Some(2.5),
                acquire_p99_us: Some(9.0),
                ..Figures::default()
            },
        }
    }

    #[test]
    fn json_has_exactly_the_documented_schema() {
        let v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&v), ["capabilities", "figures", "provider", "results"]);
        assert_eq!(
            keys(&v["capabilities"]),
            ["extend", "fencing", "granularity_ms", "max_name_len", "owner_checked", "server_time"]
        );
        assert_eq!(keys(&v["results"][0]), ["detail", "duration_ms", "id", "name", "outcome"]);
        assert_eq!(
            keys(&v["figures"]),
            [
                "acquire_p50_us",
                "acquire_p99_us",
                "round_trips_acquire",
                "round_trips_release",
                "skew_bound_ms"
            ]
        );
        assert_eq!(v["provider"], "p");
        assert_eq!(v["capabilities"]["granularity_ms"], 1000);
        assert!(v["capabilities"]["max_name_len"].is_null());
        assert_eq!(v["results"][0]["outcome"], "pass");
        assert_eq!(v["results"][1]["outcome"], "not_applicable");
        assert_eq!(v["results"][0]["duration_ms"], 12);
        assert_eq!(v["figures"]["acquire_p50_us"], 2.5);
        assert!(v["figures"]["round_trips_acquire"].is_null());
        assert!(v["figures"]["skew_bound_ms"].is_null());
    }

    #[test]
    fn markdown_has_title_tables_and_figures() {
        let md = sample().to_markdown();
        assert!(md.starts_with("# Conformance report: p\n"));
        assert!(md.contains("| extend | yes |"));
        assert!(md.contains("| C01 | lock_is_held | pass | ok \\| fine really | 12 |"), "{md}");
        assert!(md.contains("| C24 | backend_unreachable | not applicable |"));
        assert!(md.contains("| acquire p50 | 2.5 µs |"));
        assert!(md.contains("| round trips per acquire | n/a |"));
    }

    #[test]
    fn report_files_are_written_where_asked() {
        let dir =
            std::env::temp_dir().join(format!("shedlock-conformance-test-{}", std::process::id()));
        let (md, json) = sample().write_to(&dir).unwrap();
        assert_eq!(md, dir.join("p.md"));
        assert_eq!(json, dir.join("p.json"));
        assert!(std::fs::read_to_string(&json).unwrap().contains("\"provider\": \"p\""));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn workspace_root_is_the_nearest_workspace_manifest() {
        let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let root = workspace_root(&here).unwrap();
        let text = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(text.contains("[workspace]"));
        assert!(here.starts_with(&root));
    }
}
