//! The README's "Permissions" blocks, read from the README itself, so that the tests grant
//! exactly what it documents.

const README: &str = include_str!("../../README.md");

/// The publish and subscribe allow lists of the README block for `purpose` (the code block whose
/// first line starts with `# <purpose>`), for `bucket` (the README's blocks are for `shedlock`).
pub fn readme_block(purpose: &str, bucket: &str) -> (Vec<String>, Vec<String>) {
    let head = format!("```text\n# {purpose}");
    let start = README.find(&head).unwrap_or_else(|| panic!("no README block {head:?}"));
    let block = &README[start + head.len()..];
    let block = &block[..block.find("```").expect("the block ends")];
    let quoted = |text: &str| -> Vec<String> {
        text.split('"')
            .skip(1)
            .step_by(2)
            .map(|s| s.replace("KV_shedlock", &format!("KV_{bucket}")))
            .map(|s| s.replace("$KV.shedlock.", &format!("$KV.{bucket}.")))
            .collect()
    };
    let (publish, subscribe) = block.split_once("subscribe:").expect("a subscribe rule");
    // The comment line names the bucket in quotes too: not a subject.
    let publish = &publish[publish.find("permissions").expect("a permissions block")..];
    (quoted(publish), quoted(subscribe))
}

/// The union of the README's blocks for `purposes`, in the README's order.
pub fn readme_permissions(purposes: &[&str], bucket: &str) -> (Vec<String>, Vec<String>) {
    let (mut publish, mut subscribe) = (Vec::<String>::new(), Vec::<String>::new());
    for p in purposes {
        let (p, s) = readme_block(p, bucket);
        for (list, new) in [(&mut publish, p), (&mut subscribe, s)] {
            for x in new {
                if !list.contains(&x) {
                    list.push(x);
                }
            }
        }
    }
    (publish, subscribe)
}

/// The application's grants: the README's locking, inspection and force_release blocks.
pub fn app_permissions(bucket: &str) -> (Vec<String>, Vec<String>) {
    readme_permissions(&["locking", "inspection", "force_release"], bucket)
}

/// A nats-server `permissions` block allowing exactly these subjects. An empty list is
/// `deny: [">"]`: to nats-server an empty `allow` list restricts nothing.
pub fn block(publish: &[String], subscribe: &[String]) -> String {
    let rule = |l: &[String]| match l {
        [] => r#"deny: [">"]"#.to_owned(),
        l => {
            let quoted: Vec<String> = l.iter().map(|s| format!("{s:?}")).collect();
            format!("allow: [{}]", quoted.join(", "))
        }
    };
    format!(
        "permissions: {{ publish: {{ {} }}, subscribe: {{ {} }} }}\n",
        rule(publish),
        rule(subscribe)
    )
}
