//! C22–C23: keep-alive and executor.

use crate::{report::Verdict, suite::Suite};

/// C22
pub async fn c22_keep_alive(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C23
pub async fn c23_executor(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}
