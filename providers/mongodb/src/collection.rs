//! The collection: its name (checked by the builder) and `create_collection`.

use shedlock::{Result, store::Operation, support::with_timeout};

use crate::{
    MongoLockProvider,
    error::{NAMESPACE_EXISTS, map_err, server_code},
    refusal::Cmd,
};

/// The default collection name (ShedLock's).
pub const DEFAULT_COLLECTION: &str = "shedLock";

/// The longest namespace (`<database>.<collection>`) MongoDB accepts, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 255;

/// Whether `name` is a collection name MongoDB accepts in database `db`: not empty, no `$` or
/// NUL, not starting with `system.` (reserved) or `.`, and a namespace `<db>.<collection>` of at
/// most [`MAX_NAMESPACE_LEN`] bytes.
pub(crate) fn check_collection_name(db: &str, name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("the collection name is empty".to_owned());
    }
    if name.contains('$') || name.contains('\0') {
        return Err(format!("collection name {name:?} contains '$' or NUL"));
    }
    if name.starts_with("system.") || name.starts_with('.') {
        return Err(format!(
            "collection name {name:?} starts with \"system.\" or '.', which MongoDB reserves"
        ));
    }
    let ns = db.len() + 1 + name.len();
    if ns > MAX_NAMESPACE_LEN {
        return Err(format!(
            "the namespace {db}.{name} is {ns} bytes long; MongoDB allows at most \
             {MAX_NAMESPACE_LEN}"
        ));
    }
    Ok(())
}

impl MongoLockProvider {
    /// Creates the lock collection if it does not exist yet (idempotent). Optional: MongoDB
    /// creates a missing collection on the first lock write, with its unique index on `_id`,
    /// the only index the locks need. Call it where the application's user may not create
    /// collections implicitly, or create the collection yourself
    /// (`db.createCollection("shedLock")` in mongosh).
    pub async fn create_collection(&self) -> Result<()> {
        let i = self.inner.store();
        with_timeout(Operation::CreateTable, self.inner.settings().timeout(), async {
            match i
                .database
                .create_collection(i.collection.name())
                .write_concern(i.write_concern.clone())
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if server_code(&e) == Some(NAMESPACE_EXISTS) => Ok(()),
                Err(e) => Err(map_err(i, "create_collection", Cmd::Create, e)),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collection_names_are_checked() {
        assert!(check_collection_name("app", "shedLock").is_ok());
        assert!(check_collection_name("app", "locks.jobs").is_ok());
        for bad in ["", "a$b", "a\0b", "system.locks", ".x"] {
            assert!(check_collection_name("app", bad).is_err(), "{bad:?}");
        }
        let longest = "c".repeat(MAX_NAMESPACE_LEN - 4);
        assert!(check_collection_name("app", &longest).is_ok());
        assert!(check_collection_name("app", &format!("{longest}c")).is_err());
    }
}
