//! # shedlock-duration
//!
//! The duration syntax of [shedlock](https://docs.rs/shedlock): human and ISO-8601 durations such
//! as `500ms`, `10s`, `5m`, `1h`, `1d`, a bare integer (milliseconds), `PT15M`, `P1DT2H`,
//! `PT0.5S`.
//!
//! It is its own tiny crate so that `shedlock` (at run time) and `shedlock-macros` (at compile
//! time, for `#[shedlock::lock(at_most = "10m")]`) parse exactly the same language. Use it through
//! `shedlock::parse_duration`.

use std::time::Duration;

/// Why a duration string was rejected. The offending input is kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// The string was empty (or only whitespace).
    #[error("empty duration")]
    Empty,
    /// A leading minus sign: durations are never negative.
    #[error("negative duration {0:?}: durations must not be negative")]
    Negative(String),
    /// The string matched none of the accepted forms.
    #[error(
        "invalid duration {0:?}: expected e.g. `500ms`, `10s`, `5m`, `1h`, `1d`, a bare integer \
         (milliseconds) or ISO-8601 such as `PT15M`, `P1DT2H`, `PT0.5S`"
    )]
    Invalid(String),
    /// The value does not fit in a [`Duration`].
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses a duration.
///
/// Accepted forms (surrounding whitespace is ignored):
/// - a bare non-negative integer: milliseconds (`1500`);
/// - an integer with a unit: `ms`, `s`, `m`, `h`, `d` (`500ms`, `10s`, `5m`, `1h`, `1d`);
/// - ISO-8601 durations with days, hours, minutes and (fractional) seconds, case-insensitive
///   (`PT15M`, `P1DT2H`, `PT0.5S`, `P2D`). Years, months and weeks are rejected: their length is
///   ambiguous.
///
/// ```
/// use std::time::Duration;
/// use shedlock_duration::parse_duration;
/// assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
/// assert_eq!(parse_duration("PT0.5S").unwrap(), Duration::from_millis(500));
/// assert!(parse_duration("5x").is_err());
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(input.to_owned()));
    }
    if s.starts_with(['P', 'p']) {
        return parse_iso(s).map_err(|e| e.with_input(input));
    }
    parse_simple(s).map_err(|e| e.with_input(input))
}

/// Internal error kind before the original input is attached.
enum Kind {
    Invalid,
    Overflow,
}

impl Kind {
    fn with_input(self, input: &str) -> DurationError {
        match self {
            Kind::Invalid => DurationError::Invalid(input.to_owned()),
            Kind::Overflow => DurationError::Overflow(input.to_owned()),
        }
    }
}

fn parse_simple(s: &str) -> Result<Duration, Kind> {
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(Kind::Invalid);
    }
    let value: u64 = digits.parse().map_err(|_| Kind::Overflow)?;
    let unit_ms: u64 = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(Kind::Invalid),
    };
    value.checked_mul(unit_ms).map(Duration::from_millis).ok_or(Kind::Overflow)
}

fn parse_iso(s: &str) -> Result<Duration, Kind> {
    let upper = s.to_ascii_uppercase();
    let rest = &upper[1..];
    if rest.is_empty() {
        return Err(Kind::Invalid);
    }
    let (date_part, time_part) = match rest.split_once('T') {
        Some((d, t)) => {
            if t.is_empty() {
                return Err(Kind::Invalid);
            }
            (d, Some(t))
        }
        None => (rest, None),
    };
    let mut total = Duration::ZERO;
    // Date part: only days are unambiguous.
    for (value, unit) in components(date_part)? {
        let secs = match unit {
            'D' => 86_400u64,
            _ => return Err(Kind::Invalid),
        };
        total = add(total, whole(value)?.checked_mul(secs).ok_or(Kind::Overflow)?, 0)?;
    }
    if let Some(time_part) = time_part {
        let comps = components(time_part)?;
        let mut last_rank = 0u8;
        for (value, unit) in comps {
            let rank = match unit {
                'H' => 1,
                'M' => 2,
                'S' => 3,
                _ => return Err(Kind::Invalid),
            };
            if rank <= last_rank {
                return Err(Kind::Invalid);
            }
            last_rank = rank;
            match unit {
                'H' => {
                    total = add(total, whole(value)?.checked_mul(3600).ok_or(Kind::Overflow)?, 0)?
                }
                'M' => total = add(total, whole(value)?.checked_mul(60).ok_or(Kind::Overflow)?, 0)?,
                _ => {
                    let (int, frac) = match value.split_once(['.', ',']) {
                        Some((i, f)) => (i, f),
                        None => (value, ""),
                    };
                    if int.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit())
                    {
                        return Err(Kind::Invalid);
                    }
                    let secs = whole(int)?;
                    let nanos = if frac.is_empty() {
                        0
                    } else {
                        let padded = format!("{frac:0<9}");
                        padded.parse::<u32>().map_err(|_| Kind::Invalid)?
                    };
                    total = add(total, secs, nanos)?;
                }
            }
        }
    }
    Ok(total)
}

/// Splits `12H30M` into `[("12", 'H'), ("30", 'M')]`.
fn components(s: &str) -> Result<Vec<(&str, char)>, Kind> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if c.is_ascii_alphabetic() {
            let value = &s[start..i];
            if value.is_empty() {
                return Err(Kind::Invalid);
            }
            out.push((value, c));
            start = i + c.len_utf8();
        } else if !(c.is_ascii_digit() || c == '.' || c == ',') {
            return Err(Kind::Invalid);
        }
    }
    if start != s.len() {
        return Err(Kind::Invalid);
    }
    Ok(out)
}

fn whole(value: &str) -> Result<u64, Kind> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Kind::Invalid);
    }
    value.parse().map_err(|_| Kind::Overflow)
}

fn add(total: Duration, secs: u64, nanos: u32) -> Result<Duration, Kind> {
    total
        .checked_add(Duration::new(secs, 0))
        .and_then(|d| d.checked_add(Duration::from_nanos(u64::from(nanos))))
        .ok_or(Kind::Overflow)
}
