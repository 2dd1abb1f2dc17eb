//! A fenced resource (C21): a register that refuses writes carrying a fencing token lower than
//! the highest it has seen, as a storage service protected by fencing tokens would.

use std::sync::{Mutex, PoisonError};

/// A write was refused: its token is lower than one already seen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("write with fencing token {token} refused: token {highest} was already seen")]
pub struct Refused {
    /// The refused write's token.
    pub token: u64,
    /// The highest token seen.
    pub highest: u64,
}

#[derive(Debug, Default)]
struct Inner {
    highest: Option<u64>,
    value: Option<String>,
    accepted: usize,
    refused: usize,
}

/// A register guarded by fencing tokens. Equal tokens are accepted (the same holder writing
/// twice); lower ones are refused.
#[derive(Debug, Default)]
pub struct FencedRegister {
    inner: Mutex<Inner>,
}

impl FencedRegister {
    /// An empty register.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `value` with `token`, unless a higher token was seen.
    pub fn write(&self, token: u64, value: impl Into<String>) -> Result<(), Refused> {
        let mut i = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = i.highest
            && token < h
        {
            i.refused += 1;
            return Err(Refused { token, highest: h });
        }
        i.highest = Some(token);
        i.value = Some(value.into());
        i.accepted += 1;
        Ok(())
    }

    /// The current value.
    pub fn value(&self) -> Option<String> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).value.clone()
    }

    /// The highest token seen.
    pub fn highest(&self) -> Option<u64> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).highest
    }

    /// (accepted, refused) write counts.
    pub fn counts(&self) -> (usize, usize) {
        let i = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (i.accepted, i.refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_lower_tokens_only() {
        let r = FencedRegister::new();
        r.write(5, "a").unwrap();
        r.write(5, "a2").unwrap();
        assert_eq!(r.write(4, "stale"), Err(Refused { token: 4, highest: 5 }));
        r.write(9, "b").unwrap();
        assert!(r.write(5, "stale again").is_err());
        assert_eq!(r.value().as_deref(), Some("b"));
        assert_eq!(r.highest(), Some(9));
        assert_eq!(r.counts(), (3, 2));
    }
}
