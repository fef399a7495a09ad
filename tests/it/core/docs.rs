//! The settings reference (docs/configuration.md) is what the command line
//! says: generated from `duckgate --help` by scripts/settings-doc, and
//! checked here against the binary under test, so a new or changed setting
//! without its documentation fails.

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

/// The error table of docs/api.md is the catalogue's (`src/problems.rs`):
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
