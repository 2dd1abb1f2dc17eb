//! What the commands print: a table for people, JSON for scripts.

use std::{
    io::{IsTerminal, Write},
    time::SystemTime,
};

use serde_json::{Value, json};
use shedlock::{LockInfo, TimeSource, support::iso8601_millis};

/// How records are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Aligned columns.
    Table,
    /// JSON.
    Json,
}

fn time(t: Option<SystemTime>) -> String {
    t.map_or_else(|| "-".to_owned(), iso8601_millis)
}

fn judged(t: TimeSource) -> &'static str {
    match t {
        TimeSource::Server => "server",
        TimeSource::Client => "client",
    }
}

/// One record as JSON.
pub(crate) fn to_json(r: &LockInfo) -> Value {
    json!({
        "name": r.name,
        "held": r.held,
        "locked_by": r.locked_by,
        "locked_at": r.locked_at.map(iso8601_millis),
        "lock_until": r.lock_until.map(iso8601_millis),
        "fencing_token": r.fencing_token,
        "judged_by": judged(r.judged_by),
        "acquisition": r.acquisition,
    })
}

/// The rows of a table, the header first.
fn rows(records: &[LockInfo]) -> Vec<[String; 6]> {
    let mut rows = vec![[
        "NAME".to_owned(),
        "STATE".to_owned(),
        "LOCKED BY".to_owned(),
        "LOCKED AT (UTC)".to_owned(),
        "LOCK UNTIL (UTC)".to_owned(),
        "TOKEN".to_owned(),
    ]];
    for r in records {
        rows.push([
            r.name.escape_debug().to_string(),
            if r.held { "held" } else { "free" }.to_owned(),
            r.locked_by.as_deref().unwrap_or("-").escape_debug().to_string(),
            time(r.locked_at),
            time(r.lock_until),
            r.fencing_token.map_or_else(|| "-".to_owned(), |t| t.to_string()),
        ]);
    }
    rows
}

fn table(records: &[LockInfo]) -> String {
    let rows = rows(records);
    let mut widths = [0usize; 6];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A listing.
pub(crate) fn records(records: &[LockInfo], format: Format) {
    match format {
        Format::Table => {
            print(&table(records));
            let held = records.iter().filter(|r| r.held).count();
            let judge = records.first().map_or("", |r| judged(r.judged_by));
            let by =
                if judge.is_empty() { String::new() } else { format!(", judged by {judge} time") };
            eprintln!("{} record(s), {held} held{by}", records.len());
        }
        Format::Json => {
            print(&format!("{}\n", Value::Array(records.iter().map(to_json).collect())))
        }
    }
}

/// One lock (`None`: no record).
pub(crate) fn one(name: &str, info: Option<&LockInfo>, format: Format) {
    match (info, format) {
        (Some(r), Format::Table) => {
            let rows = [
                ("name", r.name.escape_debug().to_string()),
                (
                    "state",
                    format!(
                        "{} (judged by {} time)",
                        if r.held { "held" } else { "free" },
                        judged(r.judged_by)
                    ),
                ),
                ("locked by", r.locked_by.as_deref().unwrap_or("-").escape_debug().to_string()),
                ("locked at", time(r.locked_at)),
                ("lock until", time(r.lock_until)),
                (
                    "fencing token",
                    r.fencing_token.map_or_else(|| "-".to_owned(), |t| t.to_string()),
                ),
                ("acquisition", r.acquisition.escape_debug().to_string()),
            ];
            let text: String = rows.iter().map(|(k, v)| format!("{k:<14}{v}\n")).collect();
            print(&text);
        }
        (None, Format::Table) => print(&format!("{}: no record (free)\n", name.escape_debug())),
        (Some(r), Format::Json) => print(&format!("{}\n", to_json(r))),
        (None, Format::Json) => print(&format!("{}\n", json!({ "name": name, "record": null }))),
    }
}

/// The record a forced release released.
pub(crate) fn released(was: &LockInfo, format: Format) {
    match format {
        Format::Table => print(&format!(
            "released {} (held by {}); its holder sees LockLost at its next extend\n",
            was.name.escape_debug(),
            was.locked_by.as_deref().unwrap_or("-").escape_debug()
        )),
        Format::Json => print(&format!("{}\n", json!({ "released": to_json(was) }))),
    }
}

/// A remark for people (stderr), or nothing in JSON mode (the exit code says it).
pub(crate) fn note(text: &str, format: Format) {
    if format == Format::Table {
        eprintln!("{text}");
    }
}

/// One refresh of `watch`: the screen cleared first on a terminal; one JSON line otherwise.
pub(crate) fn refresh(records: &[LockInfo], format: Format) {
    let at = iso8601_millis(SystemTime::now());
    match format {
        Format::Table => {
            let clear = if std::io::stdout().is_terminal() { "\x1b[2J\x1b[H" } else { "" };
            print(&format!("{clear}{at}\n{}\n", table(records)));
        }
        Format::Json => {
            let line =
                json!({ "at": at, "records": records.iter().map(to_json).collect::<Vec<_>>() });
            print(&format!("{line}\n"));
        }
    }
}
