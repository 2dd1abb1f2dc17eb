//! C18–C19: time and clocks.

use crate::{report::Verdict, suite::Suite};

/// C18
pub async fn c18_clock_skew(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C19
pub async fn c19_scheduler_once(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}
