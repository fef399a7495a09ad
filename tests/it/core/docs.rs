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
