//! Durations: parsing lives in `shedlock-duration` (shared with the macros); formatting for
//! messages lives here.

use std::time::Duration;

pub use shedlock_duration::{DurationError, parse_duration};

/// Formats a duration compactly for messages (`1500ms`, `30s`, `2m`).
pub(crate) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) && ms > 0 {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}
