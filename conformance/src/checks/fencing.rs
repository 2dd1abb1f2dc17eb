//! C20–C21: fencing.

use crate::{report::Verdict, suite::Suite};

/// C20
pub async fn c20_fencing_monotonic(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C21
pub async fn c21_fenced_resource(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}
