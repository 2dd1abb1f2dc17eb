//! The bucket: `create_bucket`, `check_bucket`, and what a missing bucket means.

use aws_sdk_s3::{
    error::ProvideErrorMetadata,
    types::{BucketLocationConstraint, CreateBucketConfiguration},
};
use shedlock::{Error, LockProvider, Result, store::Operation, support::with_timeout};

use crate::BACKEND;
use crate::{S3LockProvider, refusal::Call, store::S3Store};

impl S3LockProvider {
    /// Creates the bucket (in the client's region), or accepts it if this account already owns
    /// it. Idempotent.
    pub async fn create_bucket(&self) -> Result<()> {
        let i = self.inner.store();
        with_timeout(Operation::CreateTable, self.inner.settings().timeout(), async {
            let mut req = i.client.create_bucket().bucket(&i.bucket);
            if let Some(region) =
                i.client.config().region().map(|r| r.as_ref()).filter(|r| *r != "us-east-1")
            {
                req = req.create_bucket_configuration(
                    CreateBucketConfiguration::builder()
                        .location_constraint(BucketLocationConstraint::from(region))
                        .build(),
                );
            }
            match req.send().await {
                Ok(_) => Ok(()),
                Err(e)
                    if e.as_service_error().and_then(ProvideErrorMetadata::code)
                        == Some("BucketAlreadyOwnedByYou") =>
                {
                    Ok(())
                }
                Err(e) => Err(i.map_err("create_bucket", Call::CreateBucket, e)),
            }
        })
        .await
    }

    /// Checks that the bucket exists and that this client may lock in it, writing nothing:
    /// `ListObjectsV2` under the prefix, `GetObject` and a refused conditional `PutObject` of
    /// a key no lock has (`s3:ListBucket`, `s3:GetObject`, `s3:PutObject`; see "Permissions" in
    /// the README). Otherwise [`Error::Setup`] says what to change. The same as
    /// [`LockProvider::check`].
    pub async fn check_bucket(&self) -> Result<()> {
        self.inner.check().await
    }
}

impl S3Store {
    pub(crate) fn missing_bucket(&self) -> Error {
        Error::setup(
            BACKEND,
            format!(
                "the bucket {b:?} does not exist: call create_bucket(), or create it with `aws s3api \
             create-bucket --bucket {b}` (conditional writes need S3 or a server that supports \
             If-None-Match and If-Match on PutObject)",
                b = self.bucket
            ),
        )
    }
}
