//! [`Flavor`]: MariaDB (≥ 10.5, `RETURNING`) or MySQL, configured or detected from the
//! server's version.

/// Which server the pool talks to; it decides how an acquire learns whether it won.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Flavor {
    /// Ask the server once (`SELECT VERSION()` on first use): MariaDB ≥ 10.5 is
    /// [`MariaDb`](Flavor::MariaDb), anything else [`MySql`](Flavor::MySql).
    #[default]
    Detect,
    /// MariaDB ≥ 10.5: `INSERT … ON DUPLICATE KEY UPDATE … RETURNING`, one round trip.
    MariaDb,
    /// MySQL (no `RETURNING`), or MariaDB < 10.5: the guarded upsert, then a primary-key
    /// `SELECT` on the same connection, two round trips. The SQL is the MariaDB statement without
    /// `RETURNING` (tested here against MariaDB; MySQL 8 itself is not available in this
    /// project's test environment). `VALUES()` in `ON DUPLICATE KEY UPDATE` is deprecated in
    /// MySQL ≥ 8.0.20 (a warning) but still supported.
    MySql,
}

/// Parses `SELECT VERSION()`: MariaDB ≥ 10.5 supports `INSERT … RETURNING`.
pub(crate) fn flavor_of(version: &str) -> Flavor {
    if !version.to_ascii_lowercase().contains("mariadb") {
        return Flavor::MySql;
    }
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty());
    let major: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    if (major, minor) >= (10, 5) { Flavor::MariaDb } else { Flavor::MySql }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(flavor_of("10.11.19-MariaDB-0+deb12u1"), Flavor::MariaDb);
        assert_eq!(flavor_of("10.5.0-MariaDB"), Flavor::MariaDb);
        assert_eq!(flavor_of("10.4.30-MariaDB"), Flavor::MySql);
        assert_eq!(flavor_of("11.4.2-MariaDB-log"), Flavor::MariaDb);
        assert_eq!(flavor_of("8.0.36"), Flavor::MySql);
        assert_eq!(flavor_of("8.4.0-commercial"), Flavor::MySql);
    }
}
