//! The operator's scripts on the first day: `scripts/image build` and
//! `k6/run-soak` use the release binary already built and compile nothing
//! unless `--build` asks (a `cargo` on the PATH that records its calls
//! shows which), and their `--help` says so. Neither gets far here: each
//! stops at the first tool this machine is not given, after choosing its
//! binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A directory with a `cargo` that records that it ran and fails, a
/// `buildah` that does nothing, and a release binary under `target/`.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let marker = dir.path().join("cargo-ran");
        for (name, body) in [
            (
                "cargo",
                format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n", marker.display()),
            ),
            ("buildah", "#!/bin/sh\nexit 0\n".to_string()),
        ] {
            write_executable(&bin.join(name), &body);
        }
        let release = dir.path().join("target/release");
        std::fs::create_dir_all(&release).unwrap();
        write_executable(&release.join("duckgate"), "#!/bin/sh\nexit 0\n");
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("nolib")).unwrap();
        Sandbox { dir }
    }

    fn binary(&self) -> PathBuf {
        self.dir.path().join("target/release/duckgate")
    }

    fn cargo_ran(&self) -> bool {
        self.dir.path().join("cargo-ran").exists()
    }

    fn run(&self, script: &str, args: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new(format!("{ROOT}/{script}"))
            .args(args)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.dir.path().join("home"))
            .env("CARGO_TARGET_DIR", self.dir.path().join("target"))
            // Where each script stops: no libduckdb.so for the image, a k6
            // that is not there for the soak.
            .env("DUCKDB_LIB_DIR", self.dir.path().join("nolib"))
            .env("DUCKGATE_CACHE", self.dir.path().join("cache"))
            .env("DUCKGATE_TEST_PYTHON", "/nonexistent/python")
            .env("DUCKGATE_TEST_K6", "/nonexistent/k6")
            .env("DUCKGATE_EXTENSION_DIR", self.dir.path().join("ext"))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{script}: {e}"))
    }
}

fn write_executable(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn image_and_soak_use_the_built_binary_unless_asked_to_build() {
    for script in ["scripts/image", "k6/run-soak"] {
        let first = if script == "scripts/image" {
            vec!["build"]
        } else {
            vec!["--duration", "1s"]
        };
        // Without --build: the binary already built, and no cargo.
        let sandbox = Sandbox::new();
        let out = sandbox.run(script, &first);
        let said = stderr(&out);
        assert!(!out.status.success(), "{script}: {said}");
        assert!(!sandbox.cargo_ran(), "{script} ran cargo unasked: {said}");
        assert!(
            said.contains(&format!(
                "using the binary already built: {}",
                sandbox.binary().display()
            )),
            "{script}: {said}"
        );
        // With --build: cargo first (which fails here, and the script says so).
        let sandbox = Sandbox::new();
        let mut args = first.clone();
        args.push("--build");
        let out = sandbox.run(script, &args);
        let said = stderr(&out);
        assert!(!out.status.success(), "{script} --build: {said}");
        assert!(
            sandbox.cargo_ran(),
            "{script} --build did not run cargo: {said}"
        );
        // The help says which.
        let help = Sandbox::new().run(script, &["--help"]);
        assert!(help.status.success(), "{script} --help: {}", stderr(&help));
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(
            text.contains("--build") && text.contains("already built"),
            "{script} --help:\n{text}"
        );
    }
}

#[test]
fn without_any_build_the_scripts_say_how_to_get_one() {
    for (script, args) in [
        ("scripts/image", vec!["build"]),
        ("k6/run-soak", vec!["--duration", "1s"]),
    ] {
        let sandbox = Sandbox::new();
        std::fs::remove_file(sandbox.binary()).unwrap();
        // HOME's and CARGO_TARGET_DIR's builds are gone; the repository's own
        // target/ may hold one, which is then the one chosen.
        let out = sandbox.run(script, &args);
        let said = stderr(&out);
        assert!(!sandbox.cargo_ran(), "{script}: {said}");
        let repo_build = Path::new(ROOT).join("target/release/duckgate");
        if repo_build.exists() {
            assert!(said.contains("using the binary already built"), "{said}");
        } else {
            assert!(
                said.contains("no release binary built yet") && said.contains("--build"),
                "{script}: {said}"
            );
        }
    }
}
