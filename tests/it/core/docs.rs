//! The settings reference (docs/configuration.md) is what the command line
//! says: rendered from clap's model of it by `duckgate settings-doc`
//! (src/config/reference.rs), written by scripts/settings-doc, and checked
//! here against the binary under test, so a new or changed setting without
//! its documentation fails.

#[test]
fn the_settings_reference_is_generated_from_the_command_line() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("python3")
        .arg(format!("{root}/scripts/settings-doc"))
        .arg("--check")
        .arg(env!("CARGO_BIN_EXE_duckgate"))
        .current_dir(root)
        .output()
        .expect("python3 runs scripts/settings-doc");
    assert!(
        out.status.success(),
        "docs/configuration.md is stale; regenerate it with\n  scripts/settings-doc target/release/duckgate > docs/configuration.md\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The error table of docs/api.md is the catalogue's (`src/engine/problems.rs`):
/// every kind a client can see has its row, with its status and its
/// `Retry-After`. (`bad-request` stands for the malformed requests' own
/// slugs, which the table lists by name.)
#[test]
fn the_error_table_is_the_catalogues() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md"))
        .expect("docs/api.md");
    let rows: Vec<Vec<&str>> = docs
        .lines()
        .filter(|l| l.starts_with("| 4") || l.starts_with("| 5"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    for k in duckgate::problems::ALL {
        if k.slug == "bad-request" {
            continue;
        }
        let slug = format!("`{}`", k.slug);
        let row = rows
            .iter()
            .find(|r| r[1] == k.status.to_string() && r[2].split(", ").any(|s| s == slug))
            .unwrap_or_else(|| panic!("docs/api.md has no row for {} {}", k.status, k.slug));
        let retry = row[row.len() - 2];
        match k.retry_after {
            Some(n) => assert!(
                retry.contains(&n.to_string()) || retry.contains("expected wait"),
                "{} {}: Retry-After {n}, the docs say `{retry}`",
                k.status,
                k.slug
            ),
            None => assert!(
                retry.is_empty(),
                "{} {}: no Retry-After, the docs say `{retry}`",
                k.status,
                k.slug
            ),
        }
    }
}

/// The anchors GitHub gives the headings of a Markdown text, in order:
/// the heading's text as rendered (code spans and links as their text,
/// emphasis marks dropped), lowercased, every character but letters,
/// digits, `_`, `-` and spaces removed, spaces made `-`; a repeated anchor
/// gets `-1`, `-2`, ... (github-slugger's rules). Fenced code is skipped.
pub fn github_anchors(markdown: &str) -> Vec<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut anchors = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced || line.starts_with("    ") {
            continue;
        }
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let raw = t[hashes..].trim().trim_end_matches('#').trim();
        // Links as their text: [text](target) -> text.
        let mut text = String::new();
        let mut rest = raw;
        while let Some(open) = rest.find('[') {
            let Some(close) = rest[open..].find("](").map(|i| open + i) else {
                break;
            };
            let Some(end) = rest[close..].find(')').map(|i| close + i) else {
                break;
            };
            text.push_str(&rest[..open]);
            text.push_str(&rest[open + 1..close]);
            rest = &rest[end + 1..];
        }
        text.push_str(rest);
        let base: String = text
            .replace(['`', '*'], "")
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

#[test]
fn anchors_are_computed_as_github_computes_them() {
    let md = "# Operations\n## Named sources: `[[source]]`\n```sh\n# not a heading\n```\n\
              ## Lake catalogs: `[[attach]]`\n### What reloads and what needs a restart\n\
              ## The [Kubernetes](k8s.md) manifests\n## Probes\n## Probes\n### DuckgateServerErrors\n\
              ## Upgrades, mixed versions & rollback\n";
    assert_eq!(
        github_anchors(md),
        [
            "operations",
            "named-sources-source",
            "lake-catalogs-attach",
            "what-reloads-and-what-needs-a-restart",
            "the-kubernetes-manifests",
            "probes",
            "probes-1",
            "duckgateservererrors",
            "upgrades-mixed-versions--rollback",
        ]
    );
}

/// Every alert's `runbook_url` (deploy/monitoring/alerts.yml) names a
/// heading that exists: a file of the repository and one of its anchors,
/// as GitHub computes them (8 of 10 pointed nowhere). And every alert has
/// one.
#[test]
fn every_runbook_url_names_a_heading_that_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let alerts = std::fs::read_to_string(root.join("deploy/monitoring/alerts.yml")).unwrap();
    let names: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    let urls: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
        .map(|u| u.trim_matches('"'))
        .collect();
    assert!(names.len() >= 12, "{names:?}");
    assert_eq!(names.len(), urls.len(), "an alert without its runbook_url");
    for (name, url) in names.iter().zip(&urls) {
        let (file, anchor) = url
            .split_once('#')
            .unwrap_or_else(|| panic!("{name}: {url} names no heading"));
        let text = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("{name}: {url}: {file}: {e}"));
        let anchors = github_anchors(&text);
        assert!(
            anchors.iter().any(|a| a == anchor),
            "{name}: {url}: {file} has no heading whose anchor is `{anchor}`"
        );
    }
}

/// The links between the operator's documents (docs/operations.md, the
/// Kubernetes README, the README) that name a heading of another document
/// (or their own) name one that exists.
#[test]
fn the_operators_documents_link_to_headings_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    for doc in [
        "docs/operations.md",
        "deploy/kubernetes/README.md",
        "README.md",
    ] {
        let path = root.join(doc);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            let Some((file, anchor)) = target.split_once('#') else {
                continue;
            };
            if file.contains("://") || anchor.is_empty() {
                continue;
            }
            let linked = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            let Ok(linked_text) = std::fs::read_to_string(&linked) else {
                broken.push(format!("{doc}: {target}: no such file"));
                continue;
            };
            if !github_anchors(&linked_text).iter().any(|a| a == anchor) {
                broken.push(format!("{doc}: {target}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to missing headings:\n{}",
        broken.join("\n")
    );
}

/// Every file of the tree the documents name in backquotes exists: a full
/// path (`src/...`, `tests/...`, `scripts/...`, ...) where it says, a
/// shorter one (`execute/inline.rs`, `errors.cpp`) as the end of some
/// file's path. A file moved or removed without its documents fails here.
#[test]
fn every_file_the_documents_name_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name == ".git" || name == "target" || name == "node_modules" {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(
                    path.strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .to_string(),
                );
            }
        }
    }
    let tops = [
        "src/",
        "tests/",
        "scripts/",
        "deploy/",
        "ui/",
        "bench/",
        "k6/",
        "examples/",
        "clients/",
        "openapi/",
        "docs/",
    ];
    let kinds = [
        ".rs", ".cpp", ".hpp", ".h", ".py", ".js", ".tsv", ".toml", ".yml", ".yaml",
    ];
    let mut documents = vec![root.join("README.md")];
    documents.extend(
        std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("history.md")),
    );
    let (mut checked, mut missing) = (0, Vec::new());
    for doc in &documents {
        let text = std::fs::read_to_string(doc).unwrap();
        for (n, quoted) in text.split('`').enumerate() {
            if n % 2 == 0
                || quoted.contains(char::is_whitespace)
                || quoted.contains(['*', '{', '<', '$'])
            {
                continue;
            }
            let name = quoted.trim_end_matches([',', '.', ':']);
            let full = tops.iter().any(|t| name.starts_with(t));
            let file_like = kinds.iter().any(|k| name.ends_with(k));
            if !(full || file_like) {
                continue;
            }
            let name = name.trim_end_matches('/');
            let exists = if full {
                root.join(name).exists()
            } else {
                files
                    .iter()
                    .any(|f| f == name || f.ends_with(&format!("/{name}")))
            };
            checked += 1;
            if !exists {
                missing.push(format!(
                    "{}: {name}",
                    doc.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} names checked: the scan is broken"
    );
    assert!(
        missing.is_empty(),
        "{} of {checked} files the documents name do not exist:\n{}",
        missing.len(),
        missing.join("\n")
    );
}
