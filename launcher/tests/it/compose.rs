//! docker-compose.yml publishes exactly the ports docker mode connects to.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock_launcher::{Backend, workspace_root};

/// The lines of service `name`'s block (two-space-indented key up to the next one).
fn service_block<'a>(compose: &'a str, name: &str) -> Vec<&'a str> {
    let header = format!("  {name}:");
    let mut lines = compose.lines().skip_while(|l| {
        !(l.starts_with(&header) && l[header.len()..].trim_start().chars().all(|c| c != ':'))
    });
    let Some(_) = lines.next() else { panic!("service {name} not in docker-compose.yml") };
    lines
        .take_while(|l| l.is_empty() || l.starts_with("    ") || l.trim_start().starts_with('#'))
        .collect()
}

#[test]
fn every_backend_has_its_compose_services_profile_and_ports() {
    let compose =
        std::fs::read_to_string(workspace_root().unwrap().join("docker-compose.yml")).unwrap();
    for backend in Backend::ALL {
        let services = backend.compose_services();
        let ports = backend.compose_ports();
        assert_eq!(services.len(), ports.len(), "{backend}");
        for (service, port) in services.iter().zip(ports) {
            let block = service_block(&compose, service);
            let text = block.join("\n");
            // Published on loopback, or (the Redis Cluster, whose nodes announce their own
            // addresses to clients) listening on that port in the host's network.
            let published = text.contains(&format!("\"127.0.0.1:{port}:"));
            let host_network = text.contains("network_mode: host")
                && text.contains(&format!("\"--port\", \"{port}\""))
                && text.contains("\"--bind\", \"127.0.0.1\"");
            assert!(
                published || host_network,
                "service {service} of {backend} must publish 127.0.0.1:{port}, or listen on \
                 127.0.0.1:{port} with network_mode: host:\n{text}"
            );
            // The first member of a cluster carries the profile; the others inherit it.
            if service == &services[0] {
                assert!(
                    text.contains(&format!("profiles: [{}, all]", backend.name())),
                    "service {service} must be in profile {}",
                    backend.name()
                );
            }
            assert!(
                text.contains("healthcheck:") || service != &services[0],
                "{service} has no healthcheck"
            );
        }
    }
    // NATS' monitoring port, used by docker mode's JetStream readiness probe.
    assert!(service_block(&compose, "nats").join("\n").contains("\"127.0.0.1:18222:8222\""));
}
