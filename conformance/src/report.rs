//! The report, rendered: a [`Report`] as JSON (the documented schema), Markdown and text, and
//! the files it is written to ([`report_dir`]). Rendering only: the data types and the verdict
//! logic are in `outcome.rs`.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::{
    location::report_dir,
    outcome::{CheckResult, Figures, Outcome, Report},
    tools::proxy::BATCH_FIGURE_NAMES,
};

#[derive(Serialize, Deserialize)]
struct JsonCaps {
    extend: bool,
    fencing: bool,
    server_time: bool,
    owner_checked: bool,
    granularity_ms: u64,
    max_name_len: Option<usize>,
    /// Added later (`LockProvider::check` asks the backend): absent in older reports.
    #[serde(default)]
    check: bool,
    /// Added later (the declared `Capabilities::clock_step`, µs): absent in older reports.
    #[serde(default)]
    clock_step_us: Option<u64>,
    /// Added later (inspection, C30 and C31): absent in older reports.
    #[serde(default)]
    inspect: bool,
    #[serde(default)]
    list: bool,
    #[serde(default)]
    force_release: bool,
    /// Added later (`try_lock_many` sent as one request per chunk, C32): absent in older
    /// reports.
    #[serde(default)]
    native_batch: bool,
}

#[derive(Serialize, Deserialize)]
struct JsonResult {
    id: String,
    name: String,
    outcome: Outcome,
    detail: String,
    duration_ms: u64,
    /// The test's declaration for this check, if any.
    #[serde(default)]
    expected: Option<JsonExpected>,
    /// Whether the outcome is the expected one (see [`CheckResult::as_expected`]).
    #[serde(default)]
    as_expected: bool,
}

#[derive(Serialize, Deserialize)]
struct JsonExpected {
    outcome: Outcome,
    reason: String,
}

#[derive(Serialize, Deserialize)]
struct JsonFigures {
    acquire_p50_us: Option<f64>,
    acquire_p99_us: Option<f64>,
    round_trips_acquire: Option<f64>,
    round_trips_release: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    round_trips_batch_100: Option<f64>,
    skew_bound_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acquisitions_checked: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    overlaps: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct JsonSecurity {
    user: String,
    grants: Vec<String>,
    tls: String,
}

#[derive(Serialize, Deserialize)]
struct JsonReport {
    provider: String,
    /// What it ran against (absent from reports written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    /// The user, grants and TLS of a secure suite (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    security: Option<JsonSecurity>,
    capabilities: JsonCaps,
    results: Vec<JsonResult>,
    figures: JsonFigures,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Report {
    /// The report as JSON, in the documented schema.
    pub fn to_json(&self) -> String {
        let c = &self.capabilities;
        let r = JsonReport {
            provider: self.provider.clone(),
            server: self.server.clone(),
            security: self.security.as_ref().map(|s| JsonSecurity {
                user: s.user().to_owned(),
                grants: s.grants().to_vec(),
                tls: s.tls().to_owned(),
            }),
            capabilities: JsonCaps {
                extend: c.extend,
                fencing: c.fencing,
                server_time: c.server_time,
                owner_checked: c.owner_checked,
                granularity_ms: ms(c.granularity),
                max_name_len: c.max_name_len,
                check: c.check,
                clock_step_us: Some(u64::try_from(c.clock_step.as_micros()).unwrap_or(u64::MAX)),
                inspect: c.inspect,
                list: c.list,
                force_release: c.force_release,
                native_batch: c.native_batch,
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
                    expected: r
                        .expected
                        .as_ref()
                        .map(|e| JsonExpected { outcome: e.outcome, reason: e.reason.clone() }),
                    as_expected: r.as_expected(),
                })
                .collect(),
            figures: JsonFigures {
                acquire_p50_us: self.figures.acquire_p50_us,
                acquire_p99_us: self.figures.acquire_p99_us,
                round_trips_acquire: self.figures.round_trips_acquire,
                round_trips_release: self.figures.round_trips_release,
                round_trips_batch_100: self.figures.round_trips_batch,
                skew_bound_ms: self.figures.skew_bound_ms,
                acquisitions_checked: self.figures.acquisitions_checked,
                overlaps: self.figures.overlaps,
            },
        };
        serde_json::to_string_pretty(&r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as Markdown: a title, the capabilities table, the results table, the figures.
    pub fn to_markdown(&self) -> String {
        let c = &self.capabilities;
        let yn = |b: bool| if b { "yes" } else { "no" };
        let mut s = format!("# Conformance report: {}\n\n", self.provider);
        if let Some(server) = &self.server {
            s.push_str(&format!("Ran against: {server}.\n\n"));
        }
        if let Some(sec) = &self.security {
            s.push_str(&format!(
                "## Security\n\nEvery instance logged in as `{}` over {}, holding exactly these \
                 grants:\n\n",
                sec.user(),
                sec.tls()
            ));
            for g in sec.grants() {
                s.push_str(&format!("- `{g}`\n"));
            }
            s.push('\n');
        }
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
        s.push_str(&format!("| check | {} |\n", yn(c.check)));
        s.push_str(&format!("| clock_step | {} µs |\n", c.clock_step.as_micros()));
        s.push_str(&format!("| inspect | {} |\n", yn(c.inspect)));
        s.push_str(&format!("| list | {} |\n", yn(c.list)));
        s.push_str(&format!("| force_release | {} |\n", yn(c.force_release)));
        s.push_str(&format!("| native_batch | {} |\n", yn(c.native_batch)));
        s.push_str(&format!("\n## Results\n\n{}\n\n", self.summary()));
        s.push_str("| id | check | outcome | detail | ms |\n|---|---|---|---|---|\n");
        for r in &self.results {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                r.id,
                r.name,
                r.outcome_label(),
                md_cell(&detail_with_reason(r)),
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
            "| round trips per batch of {BATCH_FIGURE_NAMES} names (`try_lock_many`) | {} |\n",
            num(f.round_trips_batch, "")
        ));
        s.push_str(&format!(
            "| background round trips per acquire+release (after the calls returned) | {} |\n",
            num(f.round_trips_background, "")
        ));
        s.push_str(&format!("| skew bound | {} |\n", num(f.skew_bound_ms, "ms")));
        if let Some(n) = f.acquisitions_checked {
            s.push_str(&format!("| acquisitions checked (soak) | {n} |\n"));
        }
        if let Some(n) = f.overlaps {
            s.push_str(&format!("| overlaps (soak) | {n} |\n"));
        }
        s
    }

    /// `25 pass, 0 fail, 0 unsupported, 2 not applicable (2 expected)`, plus `, N NOT AS
    /// EXPECTED` when some outcome is not the expected one.
    pub fn summary(&self) -> String {
        let count = |o: Outcome| self.results.iter().filter(|r| r.outcome == o).count();
        let declared = self
            .results
            .iter()
            .filter(|r| r.outcome != Outcome::Pass && r.expected.is_some() && r.as_expected())
            .count();
        let mut s = format!(
            "{} pass, {} fail, {} unsupported, {} not applicable",
            count(Outcome::Pass),
            count(Outcome::Fail),
            count(Outcome::Unsupported),
            count(Outcome::NotApplicable)
        );
        if declared > 0 {
            s.push_str(&format!(" ({declared} expected)"));
        }
        let unexpected = self.unexpected().len();
        if unexpected > 0 {
            s.push_str(&format!(", {unexpected} NOT AS EXPECTED"));
        }
        s
    }

    /// One line per check, then the capabilities and figures, for a terminal.
    pub fn to_text(&self) -> String {
        let c = &self.capabilities;
        let mut s = format!(
            "conformance report for {}: extend={} fencing={} server_time={} owner_checked={} \
             granularity={} ms max_name_len={} check={} clock_step={} µs inspect={} list={} \
             force_release={} native_batch={}\n",
            self.provider,
            c.extend,
            c.fencing,
            c.server_time,
            c.owner_checked,
            ms(c.granularity),
            c.max_name_len.map_or_else(|| "unlimited".to_owned(), |n| format!("{n} bytes")),
            c.check,
            c.clock_step.as_micros(),
            c.inspect,
            c.list,
            c.force_release,
            c.native_batch
        );
        for r in &self.results {
            s.push_str(&format!(
                "  {:<4} {:<34} {:<27} {:>6} ms  {}\n",
                r.id,
                r.name,
                r.outcome_label(),
                ms(r.duration),
                detail_with_reason(r)
            ));
        }
        s.push_str(&format!("  {}\n", self.summary()));
        s.push_str(&format!("  figures: {}\n", self.figures.to_text()));
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

impl Figures {
    /// The figures on one line, for people: `acquire p50 175.4 µs, p99 274 µs, round trips per
    /// acquire n/a, per release n/a, skew bound n/a`.
    pub fn to_text(&self) -> String {
        let num = |v: Option<f64>, unit: &str| {
            v.map_or_else(|| "n/a".to_owned(), |v| format!("{}{unit}", round2(v)))
        };
        format!(
            "acquire p50 {}, p99 {}, round trips per acquire {}, per release {}, skew bound {}",
            num(self.acquire_p50_us, " µs"),
            num(self.acquire_p99_us, " µs"),
            num(self.round_trips_acquire, ""),
            num(self.round_trips_release, ""),
            num(self.skew_bound_ms, " ms")
        ) + &self.round_trips_batch.map_or_else(String::new, |b| {
            format!(", per batch of {BATCH_FIGURE_NAMES} names {}", round2(b))
        }) + &match (self.acquisitions_checked, self.overlaps) {
            (Some(a), Some(o)) => format!(", soak: {a} acquisitions checked, {o} overlaps"),
            _ => String::new(),
        }
    }
}

/// The detail, followed by the declared reason when there is a declaration.
fn detail_with_reason(r: &CheckResult) -> String {
    match &r.expected {
        Some(e) => format!("{} [declared {}: {}]", r.detail, e.outcome.label(), e.reason),
        None => r.detail.clone(),
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use shedlock::Capabilities;

    use super::*;
    use crate::outcome::Expectation;

    fn sample() -> Report {
        Report {
            server: Some("PostgreSQL 15.14, native processes on loopback".into()),
            security: None,
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
                    expected: None,
                },
                CheckResult {
                    id: "C24",
                    name: "backend_unreachable",
                    outcome: Outcome::NotApplicable,
                    detail: "no address".into(),
                    duration: Duration::ZERO,
                    expected: Some(Expectation {
                        id: "C24".into(),
                        outcome: Outcome::NotApplicable,
                        reason: "embedded".into(),
                    }),
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
        // `server` was added later, and is left out when the factory did not say.
        assert_eq!(keys(&v), ["capabilities", "figures", "provider", "results", "server"]);
        assert_eq!(v["server"], "PostgreSQL 15.14, native processes on loopback");
        let mut unsaid = sample();
        unsaid.server = None;
        let u: serde_json::Value = serde_json::from_str(&unsaid.to_json()).unwrap();
        assert_eq!(keys(&u), ["capabilities", "figures", "provider", "results"]);
        assert_eq!(
            keys(&v["capabilities"]),
            [
                "check",
                "clock_step_us",
                "extend",
                "fencing",
                "force_release",
                "granularity_ms",
                "inspect",
                "list",
                "max_name_len",
                "native_batch",
                "owner_checked",
                "server_time"
            ]
        );
        // `expected` and `as_expected` were added after the first schema (fields only added).
        assert_eq!(
            keys(&v["results"][0]),
            ["as_expected", "detail", "duration_ms", "expected", "id", "name", "outcome"]
        );
        assert!(v["results"][0]["expected"].is_null());
        assert_eq!(v["results"][0]["as_expected"], true);
        assert_eq!(v["results"][1]["expected"]["outcome"], "not_applicable");
        assert_eq!(v["results"][1]["expected"]["reason"], "embedded");
        assert_eq!(v["results"][1]["as_expected"], true);
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
        // A measured batch figure is written; an unmeasured one is left out (above).
        let mut r = sample();
        r.figures.round_trips_batch = Some(1.0);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["figures"]["round_trips_batch_100"], 1.0);
        assert!(
            r.to_markdown().contains("| round trips per batch of 100 names (`try_lock_many`) | 1 ")
        );
    }

    #[test]
    fn markdown_has_title_tables_and_figures() {
        let md = sample().to_markdown();
        assert!(md.starts_with(
            "# Conformance report: p\n\nRan against: PostgreSQL 15.14, native processes on loopback.\n"
        ));
        assert!(md.contains("| extend | yes |"));
        assert!(md.contains("| C01 | lock_is_held | pass | ok \\| fine really | 12 |"), "{md}");
        assert!(
            md.contains(
                "| C24 | backend_unreachable | not applicable (expected) | no address \
                 [declared not applicable: embedded] |"
            ),
            "{md}"
        );
        assert!(md.contains("1 pass, 0 fail, 0 unsupported, 1 not applicable (1 expected)\n"));
        assert!(md.contains("| acquire p50 | 2.5 µs |"));
        assert!(md.contains("| round trips per acquire | n/a |"));
    }

    #[test]
    fn a_report_is_as_expected_only_if_every_result_is() {
        let mut r = sample();
        assert!(r.as_expected());
        r.results[1].expected = None;
        assert!(r.passed(), "nothing failed");
        assert!(!r.as_expected());
        assert_eq!(r.unexpected().len(), 1);
        assert!(r.summary().ends_with(", 1 NOT AS EXPECTED"), "{}", r.summary());
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["results"][1]["as_expected"], false);
        assert!(v["results"][1]["expected"].is_null());
    }

    #[test]
    fn the_text_report_has_no_debug_formatting() {
        let mut r = sample();
        r.capabilities = r.capabilities.with_max_name_len(Some(255));
        let t = r.to_text();
        assert!(!t.contains("Some("), "{t}");
        assert!(!t.contains("None"), "{t}");
        assert!(t.contains("max_name_len=255 bytes"), "{t}");
        assert!(t.contains("not applicable (expected)"), "{t}");
        assert!(
            t.contains(
                "figures: acquire p50 2.5 µs, p99 9 µs, round trips per acquire n/a, per \
                 release n/a, skew bound n/a"
            ),
            "{t}"
        );
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
}
