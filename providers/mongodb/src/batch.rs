//! The native batch of [`MongoStore`]: one unordered `update` command carrying every name's
//! acquire statement, then one `find` of the names it may have taken, which tells by each
//! document's `owner` (its `lockedBy` in the compatible mode) which ones this batch took.
//! Two round trips per batch of up to [`BATCH_LIMIT`] names, whatever the number of names.

use std::collections::HashMap;

use mongodb::{
    bson::{Bson, Document, doc},
    options::{ReadPreference, SelectionCriteria},
};
use shedlock::{Error, Result, store::Request};

use crate::{
    BACKEND,
    documents::id,
    error::{DUPLICATE_KEY, map_err},
    refusal::Cmd,
    store::MongoStore,
};

/// The most names in one batch's `update` command (each statement is well under a kilobyte:
/// far below the server's 16 MiB command and 100 000 statement limits).
pub(crate) const BATCH_LIMIT: usize = 500;

/// `Bson` as an index into a batch of `len` statements.
fn index(b: Option<&Bson>, len: usize) -> Option<usize> {
    let i = match b? {
        Bson::Int32(i) => usize::try_from(*i).ok()?,
        Bson::Int64(i) => usize::try_from(*i).ok()?,
        _ => return None,
    };
    (i < len).then_some(i)
}

impl MongoStore {
    /// Takes every free name of `reqs` at once: `Some(token)` (0 in the compatible mode) per
    /// name this batch took, `None` per name held elsewhere, in the order of `reqs`.
    ///
    /// The `update` command is unordered: a statement whose upsert collides with a live
    /// document (duplicate key 11000, in client time) fails alone and the others run. In server
    /// time every statement matches its document and its pipeline decides; so in both modes the
    /// names are then read back (`find` on the primary) and a name is this batch's only when its
    /// document carries this acquisition's owner. A document taken over between the two
    /// commands (its new lease already over) reads as another holder's: the name is answered
    /// as held, never as won by two.
    pub(crate) async fn take_many(&self, reqs: &[Request<'_>]) -> Result<Vec<Option<u64>>> {
        let updates: Vec<Document> = reqs
            .iter()
            .map(|req| {
                let (q, set) = self.take_statement(req);
                doc! { "q": q, "u": [{ "$set": set }], "upsert": true }
            })
            .collect();
        let mut command = doc! {
            "update": self.collection.name(),
            "updates": updates,
            "ordered": false,
        };
        if let Ok(wc) = mongodb::bson::to_document(&self.write_concern)
            && !wc.is_empty()
        {
            command.insert("writeConcern", wc);
        }
        let reply = self
            .database
            .run_command(command)
            .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
            .await
            .map_err(|e| map_err(self, "try_lock", Cmd::Update, e))?;
        if let Ok(e) = reply.get_document("writeConcernError") {
            return Err(Error::backend(
                BACKEND,
                format!("a batch acquire's write concern was not met: {e}"),
            ));
        }
        let mut held = vec![false; reqs.len()];
        if let Ok(errors) = reply.get_array("writeErrors") {
            for e in errors.iter().filter_map(Bson::as_document) {
                match (index(e.get("index"), reqs.len()), e.get_i32("code")) {
                    (Some(i), Ok(DUPLICATE_KEY)) => held[i] = true,
                    _ => {
                        return Err(Error::backend(
                            BACKEND,
                            format!("a batch acquire's statement failed: {e}"),
                        ));
                    }
                }
            }
        }
        let names: Vec<Bson> =
            reqs.iter().zip(&held).filter(|(_, h)| !**h).map(|(r, _)| id(r.name())).collect();
        let mut docs: HashMap<String, Document> = HashMap::with_capacity(names.len());
        if !names.is_empty() {
            let mut cursor = self
                .collection
                .find(doc! { "_id": { "$in": names } })
                .projection(doc! { "owner": 1, "token": 1, "lockedBy": 1 })
                .selection_criteria(SelectionCriteria::ReadPreference(ReadPreference::Primary))
                .await
                .map_err(|e| map_err(self, "try_lock", Cmd::Find, e))?;
            while cursor.advance().await.map_err(|e| map_err(self, "try_lock", Cmd::Find, e))? {
                let doc = cursor
                    .deserialize_current()
                    .map_err(|e| map_err(self, "try_lock", Cmd::Find, e))?;
                if let Ok(name) = doc.get_str("_id") {
                    docs.insert(name.to_owned(), doc);
                }
            }
        }
        reqs.iter()
            .zip(held)
            .map(|(req, held)| match docs.get(req.name()) {
                Some(doc) if !held => self.taken_by(req, doc),
                _ => Ok(None),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_error_index_is_read_only_within_the_batch() {
        assert_eq!(index(Some(&Bson::Int32(3)), 4), Some(3));
        assert_eq!(index(Some(&Bson::Int64(0)), 1), Some(0));
        assert_eq!(index(Some(&Bson::Int32(4)), 4), None, "past the batch");
        assert_eq!(index(Some(&Bson::Int32(-1)), 4), None);
        assert_eq!(index(Some(&Bson::String("1".into())), 4), None);
        assert_eq!(index(None, 4), None);
    }
}
