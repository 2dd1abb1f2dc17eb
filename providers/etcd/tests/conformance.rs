//! The shedlock conformance suite (C01–C32) against a real etcd server, provider name `etcd`.
//!
//! Each instance has its own client (like a separate node). The hooks give the kit raw key access
//! (C14), the server address for its fault proxy (C24 and the round-trip figures) and a restart
//! of the server (C25) — unless the server comes from `SHEDLOCK_ETCD_URL` (as under `cargo xtask
//! test`), which is not ours to restart: C25 is then expected to be "not applicable". Every other
//! check must pass.
//!
//! `etcd-secure` runs the same checks against the launcher's secure etcd (https only, `auth
//! enable`d): every instance logs in as `shedlock_app` over TLS, and that user holds one role
//! granting `readwrite` on the suite's key prefix, exactly the README's "Permissions".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use shedlock::BoxError;
use shedlock_conformance::Security;
use shedlock_launcher::Backend;
use shedlock_test_support::{self as testing, faults, secure::Secured, server_options, suite};

/// `etcd-secure`'s factory: its own prefix and role, granted to `shedlock_app`.
async fn secure() -> Result<Secured<common::Single>, BoxError> {
    let service = testing::secure::service(Backend::Etcd, "etcd").await?;
    let s = service.secure().ok_or("the secure launch says nothing of its credentials")?;
    // C28's node processes share the run id: the same prefix and role (made again: idempotent).
    let run = shedlock_conformance::run_id();
    let prefix = format!("conformance-secure/{run}/");
    let role = format!("shedlock_conformance_{run}");
    let inner = common::Single::secure(service, prefix.clone(), &role).await?;
    let security = Security::new(
        s.app_user(),
        format!(
            "{} (https://, server certificate verified against the launcher's throwaway CA), \
             password login (etcd auth, simple token)",
            s.tls_version()
        ),
    )
    .grant(format!("etcdctl role add {role}"))
    .grant(format!("etcdctl role grant-permission {role} --prefix=true readwrite {prefix}"))
    .grant(format!("etcdctl user grant-role {} {role}", s.app_user()))
    .secret(s.app_password())
    .secret(s.admin_password());
    Ok(Secured::new(inner, security, service))
}

fn main() -> std::process::ExitCode {
    shedlock_conformance::harness_suites(vec![
        suite(Backend::Etcd, "etcd", server_options(Backend::Etcd), common::Single::new)
            // The fault scenario: the nodes' `etcd` factory on the 3-node cluster.
            .with_faults(faults::plan("etcd-cluster", Backend::EtcdCluster, Backend::Etcd)),
        testing::secure::suite(Backend::Etcd, "etcd-secure", testing::secure::options(), secure),
    ])
}
