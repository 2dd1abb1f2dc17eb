//! What docker-compose.yml and the GitHub workflow promise, checked against the launcher, the
//! provider tests and the committed conformance reports, so that Docker mode and GitHub CI cannot
//! drift from the code while no test here can run them (the project's machines have no Docker
//! engine). Run by the workspace's tests (`cargo xtask test`).

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use shedlock_launcher::Backend;
    use yaml_rust2::{Yaml, YamlLoader};

    use crate::util::root;

    fn read(file: &str) -> String {
        std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    fn yaml(file: &str) -> Yaml {
        let mut docs =
            YamlLoader::load_from_str(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(docs.len(), 1, "{file}: one document");
        docs.remove(0)
    }

    /// A mapping with its `<<` merge keys applied (compose's anchors), keyed by string.
    fn mapping(y: &Yaml) -> BTreeMap<String, Yaml> {
        let mut out = BTreeMap::new();
        let Some(h) = y.as_hash() else { return out };
        if let Some(base) = h.get(&Yaml::String("<<".into())) {
            out.extend(mapping(base));
        }
        for (k, v) in h {
            if let Some(k) = k.as_str().filter(|k| *k != "<<") {
                out.insert(k.to_owned(), v.clone());
            }
        }
        out
    }

    fn strings(y: Option<&Yaml>) -> Vec<String> {
        y.and_then(Yaml::as_vec)
            .map(|v| v.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }

    /// The services of docker-compose.yml, merge keys applied.
    fn services() -> BTreeMap<String, BTreeMap<String, Yaml>> {
        let compose = mapping(&yaml("docker-compose.yml"));
        mapping(compose.get("services").expect("services:"))
            .into_iter()
            .map(|(name, s)| (name, mapping(&s)))
            .collect()
    }

    /// A tag pinned to one release of `image`: a version with all its parts (`7.4.1`; PostgreSQL
    /// releases have two since 10: `15.10`), or MinIO's `RELEASE.<date>`.
    fn pinned(image: &str, tag: &str) -> bool {
        let parts = if image == "postgres" { 2 } else { 3 };
        let version = tag.trim_start_matches('v');
        let numeric: Vec<&str> =
            version.split(['-', '+']).next().unwrap_or("").split('.').collect();
        (numeric.len() >= parts
            && numeric.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
            || tag.starts_with("RELEASE.20")
    }

    /// The text between the quotes after `key` in `text` (`KEY: &str = "value"`, `("KEY", "value")`).
    fn quoted_after<'a>(text: &'a str, key: &str) -> &'a str {
        let at = text.find(key).unwrap_or_else(|| panic!("{key} not found"));
        let rest = &text[at + key.len()..];
        let start = rest.find('"').expect("a quoted value") + 1;
        let end = start + rest[start..].find('"').expect("a closing quote");
        &rest[start..end]
    }

    #[test]
    fn every_image_is_pinned_to_a_release_and_the_launchers_containers_use_the_same_ones() {
        let services = services();
        let mut images = BTreeSet::new();
        for (name, s) in &services {
            let image =
                s.get("image").and_then(Yaml::as_str).unwrap_or_else(|| panic!("{name}: image"));
            let (repo, tag) =
                image.rsplit_once(':').unwrap_or_else(|| panic!("{name}: {image} has no tag"));
            assert!(pinned(repo, tag), "{name}: {image} is not pinned to a full version");
            images.insert(image.to_owned());
        }
        // The launcher's testcontainers mode (feature `docker`) names its images as
        // `("<image>", "<tag>", <port>, ...)`: each must be one of the compose images.
        let docker = read("launcher/src/docker.rs");
        let table = &docker[docker.find("fn image(backend: Backend)").expect("the image table")..];
        let mut seen = 0;
        let flat = table.split_whitespace().collect::<Vec<_>>().join(" ").replace("( \"", "(\"");
        for chunk in flat.split("(\"").skip(1) {
            // `IMAGE", "TAG", PORT, ...`
            let Some((image, rest)) = chunk.split_once("\", \"") else { continue };
            let Some((tag, port)) = rest.split_once("\", ") else { continue };
            if !port.starts_with(|c: char| c.is_ascii_digit()) {
                continue;
            }
            let image = format!("{image}:{tag}");
            assert!(
                images.contains(&image),
                "the launcher's container {image} is not in docker-compose.yml"
            );
            seen += 1;
        }
        assert!(seen >= 10, "read {seen} launcher images");
        assert!(pinned("postgres", "15.10") && pinned("etcd", "v3.5.17"));
        assert!(pinned("nats", "2.11.0-alpine") && !pinned("nats", "2.11-alpine"));
        assert!(!pinned("postgres", "15") && !pinned("minio", "latest"));
        assert!(!pinned("mariadb", "10.11") && !pinned("redis", "7"));
    }

    #[test]
    fn every_suite_in_the_github_matrix_starts_compose_services_that_exist_under_its_profile() {
        let services = services();
        let mut suites = 0;
        for entry in std::fs::read_dir(root().join("conformance/reports")).expect("reports") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let suite = path.file_stem().and_then(|s| s.to_str()).expect("name").to_owned();
            suites += 1;
            let Some(dir) = crate::conformance::dir_of(&suite) else {
                assert!(matches!(suite.as_str(), "memory" | "toy"), "{suite}: no provider crate");
                continue;
            };
            let Some(backend) = crate::conformance::backend_of(&suite, &dir) else {
                panic!("{suite}: no backend");
            };
            if backend == Backend::Sqlite {
                continue;
            }
            let wanted = backend.compose_services();
            assert!(!wanted.is_empty(), "{suite}: {} has no compose services", backend.name());
            for name in wanted.iter().chain(backend.compose_init().iter()) {
                let s = services.get(*name).unwrap_or_else(|| panic!("{suite}: no service {name}"));
                let profiles = strings(s.get("profiles"));
                let expected = if Some(*name) == backend.compose_init() {
                    format!("{}-init", backend.name())
                } else {
                    backend.name().to_owned()
                };
                assert!(
                    profiles.contains(&expected),
                    "{suite}: {name} is not in profile {expected}: {profiles:?}"
                );
            }
            // Every service of the profile that the launcher does not start is an init it runs.
            for (name, s) in &services {
                if strings(s.get("profiles")).iter().any(|p| p == backend.name()) {
                    assert!(
                        wanted.contains(&name.as_str()),
                        "{suite}: profile {} has {name}, which the launcher never starts",
                        backend.name()
                    );
                }
            }
            // Published ports (`127.0.0.1:<host>:<container>`) are the ones docker mode dials.
            let published: BTreeSet<u16> = wanted
                .iter()
                .flat_map(|n| strings(services[*n].get("ports")))
                .filter_map(|p| p.split(':').nth(1).and_then(|h| h.parse().ok()))
                .collect();
            if !published.is_empty() {
                let dialled: BTreeSet<u16> = backend.compose_ports().iter().copied().collect();
                assert!(
                    dialled.is_subset(&published),
                    "{suite}: dials {dialled:?}, compose publishes {published:?}"
                );
            }
        }
        assert!(suites >= 20, "read {suites} reports");
    }

    #[test]
    fn the_s3_secret_is_the_same_in_compose_the_launcher_the_tests_and_the_workflow() {
        let services = services();
        let env = mapping(services["s3"].get("environment").expect("s3 environment"));
        let compose = env["MINIO_ROOT_PASSWORD"].as_str().expect("MINIO_ROOT_PASSWORD").to_owned();
        let tests = read("test-support/src/aws.rs");
        let launcher = read("launcher/src/docker.rs");
        let workflow = mapping(&yaml(".github/workflows/ci.yml"));
        let jobs = mapping(workflow.get("jobs").expect("jobs"));
        let job = mapping(jobs.get("conformance").expect("the conformance job"));
        let job_env = mapping(job.get("env").expect("its env"));
        assert_eq!(
            quoted_after(&tests, "DEFAULT_SECRET"),
            compose,
            "the S3 and DynamoDB tests' default secret (test-support)"
        );
        assert_eq!(
            quoted_after(&launcher, "\"MINIO_ROOT_PASSWORD\","),
            compose,
            "the launcher's container"
        );
        assert_eq!(
            job_env["AWS_SECRET_ACCESS_KEY"].as_str(),
            Some(compose.as_str()),
            "the workflow"
        );
    }

    #[test]
    fn the_workflow_runs_the_ci_script_once_and_builds_each_msrv_only_there() {
        let workflow = mapping(&yaml(".github/workflows/ci.yml"));
        let jobs = mapping(workflow.get("jobs").expect("jobs"));
        let text = read(".github/workflows/ci.yml");
        // .ci/run runs the tests, package, docs and msrv: no job repeats msrv.
        assert!(read(".ci/run").contains("cargo xtask msrv"));
        assert!(!text.contains("cargo xtask msrv"), "a workflow job repeats .ci/run's msrv step");
        let test = mapping(jobs.get("test").expect("the test job"));
        let minutes = test.get("timeout-minutes").and_then(Yaml::as_i64).expect("a time limit");
        // .ci/run takes about 40 minutes from a fresh clone here: leave room, stay in 90.
        assert!((60..=90).contains(&minutes), "the test job's limit: {minutes} min");
        for (name, job) in &jobs {
            assert!(mapping(job).contains_key("timeout-minutes"), "job {name} has no time limit");
        }
    }
}
