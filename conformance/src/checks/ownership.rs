//! C12–C14: ownership.

use crate::{report::Verdict, suite::Suite};

/// C12
pub async fn c12_stale_unlock_noop(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C13
pub async fn c13_stale_extend_fails(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C14
pub async fn c14_leftover_records(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}
