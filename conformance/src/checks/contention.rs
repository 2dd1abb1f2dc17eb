//! C15–C17: contention and history.

use crate::{report::Verdict, suite::Suite};

/// C15
pub async fn c15_race_one_winner(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C16
pub async fn c16_history_no_overlap(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}

/// C17
pub async fn c17_model_based(suite: &Suite) -> Verdict {
    let _ = suite;
    Verdict::fail("not implemented yet")
}
