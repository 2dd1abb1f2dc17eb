//! The table: `create_table`, `check_table`, and reading the table's description (status and
//! key schema).

use std::time::Duration;

use aws_sdk_dynamodb::{
    error::ProvideErrorMetadata,
    types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        TableStatus,
    },
};
use shedlock::{Error, LockProvider, Result, store::Operation, support::with_timeout};

use crate::{ATTR_ID, BACKEND, DynamoDbLockProvider, refusal::Call, store::DynamoStore};

/// How long [`DynamoDbLockProvider::create_table`] waits for a new table to become active.
pub const CREATE_TABLE_TIMEOUT: Duration = Duration::from_secs(120);

impl DynamoDbLockProvider {
    /// Creates the table (string partition key `_id`, on-demand capacity) and waits until it is
    /// active, or, when a table of that name exists, checks it ([`check_table`]). Idempotent.
    /// Bounded by [`CREATE_TABLE_TIMEOUT`].
    ///
    /// [`check_table`]: Self::check_table
    pub async fn create_table(&self) -> Result<()> {
        let i = self.inner.store();
        with_timeout(Operation::CreateTable, Some(CREATE_TABLE_TIMEOUT), async {
            let build = |e: aws_sdk_dynamodb::error::BuildError| Error::backend(BACKEND, e);
            let r = i
                .client
                .create_table()
                .table_name(&i.table)
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(ATTR_ID)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .map_err(build)?,
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(ATTR_ID)
                        .key_type(KeyType::Hash)
                        .build()
                        .map_err(build)?,
                )
                .billing_mode(BillingMode::PayPerRequest)
                .send()
                .await;
            match r {
                Ok(_) => {}
                Err(e)
                    if e.as_service_error().and_then(ProvideErrorMetadata::code)
                        == Some("ResourceInUseException") => {}
                Err(e) => return Err(i.map_err("create_table", Call::CreateTable, e)),
            }
            loop {
                match i.describe("create_table").await? {
                    Some(TableStatus::Active) | Some(TableStatus::Updating) => return Ok(()),
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        })
        .await
    }

    /// Checks that the table exists, is active and has the string partition key `_id` and no
    /// sort key (`DescribeTable`), and that this client may lock in it: an `UpdateItem` of
    /// [`CHECK_NAME`](crate::CHECK_NAME) whose condition never holds, which proves
    /// `dynamodb:UpdateItem` and writes nothing. Otherwise [`Error::Setup`] says what to change.
    /// The same as [`LockProvider::check`].
    pub async fn check_table(&self) -> Result<()> {
        self.inner.check().await
    }
}

impl DynamoStore {
    /// The table's status after checking its key schema; `None` while it is being created.
    pub(crate) async fn describe(&self, operation: &'static str) -> Result<Option<TableStatus>> {
        let i = self;
        let out = i
            .client
            .describe_table()
            .table_name(&i.table)
            .send()
            .await
            .map_err(|e| i.map_err(operation, Call::DescribeTable, e))?;
        let Some(t) = out.table else { return Ok(None) };
        let keys = t.key_schema();
        let attr_type = t
            .attribute_definitions()
            .iter()
            .find(|a| a.attribute_name() == ATTR_ID)
            .map(|a| a.attribute_type().clone());
        let key_ok = keys.len() == 1
            && keys[0].attribute_name() == ATTR_ID
            && keys[0].key_type() == &KeyType::Hash
            && attr_type == Some(ScalarAttributeType::S);
        if !key_ok {
            return Err(Error::setup(
                BACKEND,
                format!(
                    "the table {:?} cannot hold locks: its key must be the string partition key \
                 {ATTR_ID:?} alone, but it is {:?}",
                    i.table,
                    keys.iter()
                        .map(|k| format!("{} {:?}", k.attribute_name(), k.key_type()))
                        .collect::<Vec<_>>()
                ),
            ));
        }
        Ok(match t.table_status {
            Some(TableStatus::Creating) | None => None,
            Some(s) => Some(s),
        })
    }

    pub(crate) fn missing_table(&self) -> Error {
        Error::setup(
            BACKEND,
            format!(
                "the table {t:?} does not exist (or is not active yet): call create_table(), or create \
             it with the string partition key {ATTR_ID:?}: `aws dynamodb create-table --table-name \
             {t} --attribute-definitions AttributeName={ATTR_ID},AttributeType=S --key-schema \
             AttributeName={ATTR_ID},KeyType=HASH --billing-mode PAY_PER_REQUEST`",
                t = self.table
            ),
        )
    }
}
