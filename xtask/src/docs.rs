//! The lists in README.md and ARCHITECTURE.md that name workspace crates and checks, checked
//! against the workspace manifest and the conformance catalogue, so that they cannot drift.
//! Run by the workspace's tests (`cargo xtask test`).

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, path::Path};

    use serde_json::Value;

    use crate::{
        package::is_publishable,
        util::{metadata, root},
    };

    fn read(file: &str) -> String {
        std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    /// The rows of the first Markdown table after the heading line `heading`.
    fn table_rows<'a>(text: &'a str, heading: &str) -> Vec<Vec<&'a str>> {
        let start = text.find(heading).unwrap_or_else(|| panic!("no heading {heading:?}"));
        text[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2) // header and separator
            .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
            .collect()
    }

    /// The text between the first pair of backticks of `cell`.
    fn code(cell: &str) -> &str {
        cell.split('`').nth(1).unwrap_or_default()
    }

    /// Every backticked word of `cell`.
    fn codes(cell: &str) -> BTreeSet<String> {
        cell.split('`').skip(1).step_by(2).map(str::to_owned).collect()
    }

    /// (path relative to the root, crate name, publishable) of every workspace member.
    fn members() -> Vec<(String, String, bool)> {
        let meta = metadata().expect("cargo metadata");
        let top = root();
        meta.get("packages")
            .and_then(Value::as_array)
            .expect("packages")
            .iter()
            .map(|p| {
                let manifest = p.get("manifest_path").and_then(Value::as_str).unwrap_or_default();
                let dir = Path::new(manifest).parent().expect("a manifest has a directory");
                let rel = dir.strip_prefix(&top).expect("members live in the workspace");
                let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
                (rel.display().to_string(), name.to_owned(), is_publishable(p))
            })
            .collect()
    }

    #[test]
    fn the_readme_workspace_table_lists_every_member_once_and_nothing_else() {
        let readme = read("README.md");
        let listed: BTreeSet<(String, String)> = table_rows(&readme, "## Workspace")
            .iter()
            .map(|r| (code(r[0]).trim_end_matches('/').to_owned(), code(r[1]).to_owned()))
            .collect();
        let actual: BTreeSet<(String, String)> =
            members().into_iter().map(|(path, name, _)| (path, name)).collect();
        assert_eq!(listed, actual, "README.md's Workspace table (left) against the manifest");
    }

    #[test]
    fn the_readme_msrv_table_names_exactly_the_published_crates() {
        let readme = read("README.md");
        let listed: BTreeSet<String> = table_rows(&readme, "### Rust versions and sqlx")
            .iter()
            .flat_map(|r| codes(r[0]))
            .collect();
        let published: BTreeSet<String> =
            members().into_iter().filter(|m| m.2).map(|(_, name, _)| name).collect();
        assert_eq!(listed, published, "README.md's MSRV table (left) against the published crates");
    }

    #[test]
    fn every_published_crate_links_its_docs_rs_page_and_docs_rs_builds_the_whole_core_api() {
        let meta = metadata().expect("cargo metadata");
        let packages = meta.get("packages").and_then(Value::as_array).expect("packages");
        for p in packages.iter().filter(|p| is_publishable(p)) {
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
            let docs = p.get("documentation").and_then(Value::as_str);
            assert_eq!(docs, Some(format!("https://docs.rs/{name}").as_str()), "{name}");
        }
        // docs.rs builds the default features only: `#[shedlock::lock]`, `lock_spec!` and the
        // metrics are behind features, so the core's page must ask for them.
        let core = packages
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str) == Some("shedlock"))
            .expect("the core crate");
        let docs_rs =
            core.pointer("/metadata/docs/rs").expect("shedlock: [package.metadata.docs.rs]");
        let all = docs_rs.get("all-features").and_then(Value::as_bool) == Some(true);
        let features = core.get("features").and_then(Value::as_object).expect("features");
        for feature in features.keys().filter(|f| *f != "default") {
            let listed = docs_rs
                .get("features")
                .and_then(Value::as_array)
                .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(feature)));
            assert!(all || listed, "docs.rs would not document shedlock's feature {feature}");
        }
    }

    #[test]
    fn every_committed_report_names_what_it_ran_against_and_a_stand_in_as_one() {
        let dir = root().join("conformance/reports");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("conformance/reports") {
            let path = entry.expect("a report").path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let report: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("readable"))
                    .expect("a JSON report");
            let server = report.get("server").and_then(Value::as_str).unwrap_or_default();
            let name = path.display();
            assert!(!server.trim().is_empty(), "{name} does not say what it ran against");
            // The backends whose tests run on a stand-in for the real service say so.
            let suite = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            if ["dynamodb", "s3", "mongodb"].iter().any(|b| suite.starts_with(b)) {
                assert!(server.contains("stand-in"), "{name}: {server:?} hides its stand-in");
            }
            let md = std::fs::read_to_string(path.with_extension("md")).expect("its .md");
            assert!(md.contains(&format!("Ran against: {server}")), "{name}'s .md lacks the line");
            seen += 1;
        }
        assert!(seen >= 20, "only {seen} reports in {}", dir.display());
    }

    #[test]
    fn the_docs_name_the_catalogue_as_it_is() {
        let catalogue = shedlock_conformance::checks::catalogue();
        let last = catalogue.last().expect("the catalogue has checks").id;
        let range = format!("C01–{last}");
        let meta = metadata().expect("cargo metadata");
        let description = meta
            .get("packages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str) == Some("shedlock-conformance"))
            .and_then(|p| p.get("description").and_then(Value::as_str))
            .unwrap_or_default()
            .replace("C01-", "C01–");
        assert!(description.contains(&range), "conformance's description must name {range}");
        let readme = read("README.md");
        assert!(readme.contains(&range), "README.md must name the catalogue as {range}");
        let catalogue_doc = read("conformance/README.md");
        for check in catalogue {
            assert!(
                catalogue_doc.contains(check.id),
                "conformance/README.md does not mention {}",
                check.id
            );
        }
    }

    /// Every backend provider's README states its guarantees in one table form: these rows, in
    /// this order (a provider may add rows of its own between them).
    const GUARANTEE_ROWS: [&str; 10] = [
        "time judged by",
        "extend",
        "fencing",
        "owner-checked unlock",
        "durability",
        "granularity",
        "max name length",
        "batch (`try_lock_many`)",
        "start-up check",
        "inspection",
    ];

    #[test]
    fn every_provider_readme_states_its_guarantees_in_the_same_table_form() {
        let mut providers = 0;
        for (dir, name, _) in members() {
            if !dir.starts_with("providers/") || name == "shedlock-sql" {
                continue;
            }
            providers += 1;
            let readme = read(&format!("{dir}/README.md"));
            let lines: Vec<&str> = readme.lines().collect();
            let starts: Vec<usize> =
                (0..lines.len()).filter(|&i| lines[i].starts_with("| guarantee |")).collect();
            assert!(!starts.is_empty(), "{dir}/README.md has no `| guarantee |` table");
            for start in starts {
                let rows: Vec<&str> = lines[start + 2..]
                    .iter()
                    .take_while(|l| l.starts_with('|'))
                    .map(|l| l.trim_matches('|').split('|').next().unwrap_or_default().trim())
                    .collect();
                let common: Vec<&str> =
                    rows.iter().copied().filter(|r| GUARANTEE_ROWS.contains(r)).collect();
                assert_eq!(
                    common,
                    GUARANTEE_ROWS,
                    "{dir}/README.md line {}: the guarantee table's rows",
                    start + 1
                );
            }
        }
        assert!(providers >= 12, "found {providers} provider crates");
    }
}
