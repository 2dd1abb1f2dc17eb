//! C17 `model_based`: random operation sequences agree with the reference model.

use crate::{outcome::Verdict, suite::Suite, tools::calls::finish};

/// C17: model-based property test (proptest): random sequences of try_lock / unlock / extend /
/// wait across instances and names, checked step by step against the reference model
/// (`shedlock-memory`), shrinking to a minimal failing sequence.
pub async fn c17_model_based(suite: &Suite) -> Verdict {
    finish(crate::tools::model::run_model_check(suite).await)
}
