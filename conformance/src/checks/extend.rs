//! C09–C11: extend (capability `extend`).

use crate::{report::Verdict, suite::Suite};

/// C09
pub async fn c09_extend_keeps_lock(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C10
pub async fn c10_extend_expired_fails(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C11
pub async fn c11_extend_at_least(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}
