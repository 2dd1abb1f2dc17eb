//! C24–C27: faults and bad input.

use crate::{report::Verdict, suite::Suite};

/// C24
pub async fn c24_backend_unreachable(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C25
pub async fn c25_backend_restart(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C26
pub async fn c26_cancellation(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C27
pub async fn c27_hostile_names(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}
