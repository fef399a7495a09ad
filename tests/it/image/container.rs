//! The runtime-only container image: `Dockerfile.runtime`, built and run by
//! `scripts/image` without any registry (a Debian minbase made by mmdebstrap,
//! `buildah bud --isolation chroot --storage-driver vfs`, podman with runc).
//!
//! The checks of the file itself always run. The end-to-end test builds the
//! image from this test build's binary, runs it with a read-only root against
//! the S3/STS emulation, and asks it questions whose answers DuckDB computes
//! in this process. It needs root, buildah, mmdebstrap, podman and runc
//! (scripts/test-env installs them as root); elsewhere it says it skipped.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use serde_json::Value;

const RUNTIME: &str = include_str!("../../../Dockerfile.runtime");
const FULL: &str = include_str!("../../../Dockerfile");
const BUILD_RS: &str = include_str!("../../../build.rs");
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/image");
const TAG: &str = "localhost/duckgate:test";

/// Logical instructions (continuations joined, comments dropped) of the
/// last stage of a Dockerfile, as (KEYWORD, args).
fn final_stage(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut current = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                let l = current.trim().to_string();
                current.clear();
                if l.is_empty() {
                    continue;
                }
                let (k, rest) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
                let k = k.to_ascii_uppercase();
                if k == "FROM" {
                    out.clear();
                }
                out.push((k, rest.trim().to_string()));
            }
        }
    }
    out
}

fn all<'a>(stage: &'a [(String, String)], keyword: &str) -> Vec<&'a str> {
    stage
        .iter()
        .filter(|(k, _)| k == keyword)
        .map(|(_, a)| a.as_str())
        .collect()
}

fn last<'a>(stage: &'a [(String, String)], keyword: &str) -> &'a str {
    all(stage, keyword)
        .last()
        .copied()
        .unwrap_or_else(|| panic!("no {keyword} in the final stage"))
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Extension name -> sha256, as Dockerfile.runtime checks them
/// (`<sum> "$dir/<name>.duckdb_extension"` pairs).
fn runtime_extension_sums() -> BTreeMap<String, String> {
    let words: Vec<&str> = RUNTIME.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| is_sha256(w[0]))
        .filter_map(|w| {
            let name = w[1]
                .trim_matches('"')
                .rsplit('/')
                .next()?
                .strip_suffix(".duckdb_extension")?;
            Some((name.to_string(), w[0].to_string()))
        })
        .collect()
}

/// The same from the full Dockerfile: `HTTPFS_SHA256=`, `ICU_SHA256=` and
/// the lake extensions' `name:wheel:sum` specs.
fn full_extension_sums() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for word in FULL.split_whitespace() {
        let word = word.trim_end_matches(';');
        if let Some(sum) = word.strip_prefix("HTTPFS_SHA256=") {
            out.insert("httpfs".to_string(), sum.to_string());
        } else if let Some(sum) = word.strip_prefix("ICU_SHA256=") {
            out.insert("icu".to_string(), sum.to_string());
        } else {
            let parts: Vec<&str> = word.split(':').collect();
            if let [ext, _wheel, sum] = parts.as_slice() {
                if is_sha256(sum) {
                    out.insert(ext.to_string(), sum.to_string());
                }
            }
        }
    }
    out
}

#[test]
#[ignore = "tier image: needs buildah, mmdebstrap, podman and the test venv; scripts/test installs it"]
fn runtime_image_pins_the_files_the_full_build_pins() {
    let runtime = runtime_extension_sums();
    let full = full_extension_sums();
    assert_eq!(runtime.len(), 7, "{runtime:?}");
    assert_eq!(
        runtime, full,
        "Dockerfile.runtime and Dockerfile check different extension files"
    );
    // The library is the one build.rs pins.
    let pinned = BUILD_RS
        .lines()
        .find_map(|l| l.trim().strip_prefix("const LIB_SHA256: &str = "))
        .expect("LIB_SHA256 in build.rs")
        .trim_end_matches(';')
        .trim_matches('"');
    assert!(
        RUNTIME.contains(&format!("ARG LIBDUCKDB_SHA256={pinned}")),
        "Dockerfile.runtime does not check libduckdb.so against build.rs's {pinned}"
    );
    assert!(RUNTIME.contains("sha256sum -c"));
}

#[test]
#[ignore = "tier image: needs buildah, mmdebstrap, podman and the test venv; scripts/test installs it"]
fn runtime_image_runs_the_binary_beside_its_library_as_a_non_root_user() {
    let stage = final_stage(RUNTIME);
    // The binary's rpath is `$ORIGIN`: libduckdb.so goes in the same directory.
    let entry: Vec<String> = serde_json::from_str(last(&stage, "ENTRYPOINT")).unwrap();
    let bin_dir = Path::new(&entry[0]).parent().unwrap().to_str().unwrap();
    assert!(
        all(&stage, "COPY").iter().any(|c| {
            let w: Vec<&str> = c.split_whitespace().collect();
            w.contains(&"duckgate")
                && w.contains(&"libduckdb.so")
                && w.last().unwrap().trim_end_matches('/') == bin_dir
        }),
        "duckgate and libduckdb.so are not copied together to {bin_dir}"
    );
    // The extensions land where DUCKGATE_EXTENSION_DIR points.
    let env = all(&stage, "ENV").join(" ");
    let ext_dir = env
        .split_whitespace()
        .find_map(|p| p.strip_prefix("DUCKGATE_EXTENSION_DIR="))
        .expect("ENV DUCKGATE_EXTENSION_DIR");
    assert!(all(&stage, "COPY").iter().any(|c| {
        let w: Vec<&str> = c.split_whitespace().collect();
        w.first() == Some(&"extensions/") && w.last().unwrap().trim_end_matches('/') == ext_dir
    }));
    // ... under the subdirectory the gateway looks in.
    let subdir = duckgate::engine::EXTENSION_SUBDIR;
    let (version, platform) = subdir.split_once('/').unwrap();
    assert!(RUNTIME.contains(&format!("ARG DUCKDB_VERSION={version}")));
    assert!(RUNTIME.contains(&format!(
        "dir=\"extensions/${{DUCKDB_VERSION}}/{platform}\""
    )));
    // A numeric non-root user that exists, the same as the full image's.
    let user = last(&stage, "USER");
    let uid: u32 = user.split(':').next().unwrap().parse().unwrap();
    assert!(uid >= 1000, "{user}");
    // (Written into /etc/passwd: the image has no useradd.)
    assert!(all(&stage, "RUN")
        .join(" ")
        .contains(&format!("duckgate:x:{uid}:{uid}:")));
    assert_eq!(user, last(&final_stage(FULL), "USER"));
    // The one writable place is a volume owned by that user.
    assert!(last(&stage, "VOLUME").contains("/var/lib/duckgate"));
    assert!(all(&stage, "RUN")
        .join(" ")
        .contains(&format!("-o {uid} -g {uid} -m 0700 /var/lib/duckgate")));
    let hc = last(&stage, "HEALTHCHECK");
    assert!(hc.contains("/healthz") && hc.contains("--timeout="), "{hc}");
}

fn tool(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn script(args: &[&str], envs: &[(&str, String)]) -> Output {
    let out = Command::new(SCRIPT)
        .args(args)
        .env("DUCKGATE_IMAGE_TAG", TAG)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("scripts/image");
    assert!(
        out.status.success(),
        "scripts/image {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Stops and removes the container when the test ends, however it ends.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new(SCRIPT).args(["stop", &self.0]).output();
    }
}

/// A query's `rows` from DuckDB in this process, with icu loaded.
fn reference(sql: &str) -> Value {
    let config = duckdb::Config::default()
        .with("extension_directory", common::extension_dir())
        .unwrap()
        .with("autoinstall_known_extensions", "false")
        .unwrap();
    let conn = duckdb::Connection::open_in_memory_with_flags(config).unwrap();
    conn.execute_batch("LOAD icu; SET TimeZone = 'Europe/Berlin'")
        .unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let n = row.as_ref().column_count();
        out.push(Value::Array(
            (0..n)
                .map(|i| Value::String(row.get::<_, String>(i).unwrap()))
                .collect(),
        ));
    }
    Value::Array(out)
}

#[tokio::test]
#[ignore = "tier image: needs buildah, mmdebstrap, podman and the test venv; scripts/test installs it"]
async fn image_builds_and_serves_from_a_read_only_root() {
    let missing: Vec<&str> = ["buildah", "mmdebstrap", "podman", "runc"]
        .into_iter()
        .filter(|t| !tool(t))
        .collect();
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !missing.is_empty() || !root {
        eprintln!(
            "SKIPPED image_builds_and_serves_from_a_read_only_root: needs root and {missing:?} \
             (scripts/test-env installs them with apt-get when it runs as root)"
        );
        return;
    }

    let started = Instant::now();
    // The base image alone: its name on stdout, exit 0 (it was 1: a grep
    // that found no stale base to drop failed the pipeline).
    let base = stdout(&script(&["base"], &[]));
    assert!(base.starts_with("localhost/duckgate-base:"), "{base}");
    let binary = env!("CARGO_BIN_EXE_duckgate").to_string();
    script(
        &["build"],
        &[
            ("DUCKGATE_IMAGE_BINARY", binary),
            ("DUCKGATE_EXTENSION_DIR", common::extension_dir()),
        ],
    );
    eprintln!("image built in {:.0?}", started.elapsed());

    // The image's configuration: user, healthcheck, environment.
    let inspect: Value = serde_json::from_str(&stdout(&script(
        &["buildah", "inspect", "--type", "image", TAG],
        &[],
    )))
    .unwrap();
    let config = &inspect["Docker"]["config"];
    assert_eq!(config["User"], "10001:10001", "{config}");
    let hc = config["Healthcheck"]["Test"].to_string();
    assert!(hc.contains("/healthz"), "HEALTHCHECK {hc}");
    assert!(config["Volumes"]
        .as_object()
        .is_some_and(|v| v.contains_key("/var/lib/duckgate")));

    // Run it against the S3/STS emulation with a web-identity token in the
    // data volume, its root read-only.
    let s3 = common::S3Server::start(&["--seed-parquet", "1000"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "image-test-token\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let token = "image-test-query-token-0123456789";
    let envs = [
        format!("DUCKGATE_QUERY_TOKENS={token}"),
        "DUCKGATE_TIMEZONE=Europe/Berlin".to_string(),
        format!("DUCKGATE_S3_ROLE_ARN={}", s3.str("role_arn")),
        "DUCKGATE_S3_WEB_IDENTITY_TOKEN_FILE=/var/lib/duckgate/token".to_string(),
        format!("DUCKGATE_S3_REGION={}", s3.str("region")),
        format!("DUCKGATE_S3_ENDPOINT={}", s3.str("endpoint")),
        "DUCKGATE_S3_URL_STYLE=path".to_string(),
        "DUCKGATE_S3_USE_SSL=false".to_string(),
        "DUCKGATE_S3_SCOPE=s3://duckgate-test/".to_string(),
        format!("DUCKGATE_STS_ENDPOINT={}", s3.str("sts_endpoint")),
    ];
    let mut args = vec![
        "run".to_string(),
        port.to_string(),
        dir.path().display().to_string(),
    ];
    args.extend(envs);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let name = stdout(&script(&args, &[]));
    let container = Container(name.clone());
    eprintln!("image built and answering in {:.0?}", started.elapsed());

    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let health: Value = client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["duckdb_version"], "v1.5.5", "{health}");

    // httpfs (an S3 read with the rotated STS credentials) and icu (the
    // configured time zone, a named one), answered as DuckDB answers.
    let sql_s3 = "SELECT count(*)::VARCHAR, sum(v)::VARCHAR, max(s) \
                  FROM read_parquet('s3://duckgate-test/data/numbers.parquet')";
    let sql_ref_s3 =
        "SELECT count(*)::VARCHAR, sum((id * 0.5)::DOUBLE)::VARCHAR, max('row-' || id) \
                      FROM range(1000) t(id)";
    let sql_tz = "SELECT (TIMESTAMPTZ '2024-07-01 12:00:00+00')::VARCHAR, \
                  (TIMESTAMPTZ '2024-01-15 12:00:00+00' AT TIME ZONE 'America/New_York')::VARCHAR";
    for (sql, want) in [(sql_s3, reference(sql_ref_s3)), (sql_tz, reference(sql_tz))] {
        let r = client
            .post(format!("{base}/query"))
            .bearer_auth(token)
            .json(&serde_json::json!({ "sql": sql }))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 200, "{sql}: {body}");
        assert_eq!(body["rows"], want, "{sql}");
    }
    // Without the token: refused (the image listens with auth on).
    let r = client
        .post(format!("{base}/query"))
        .json(&serde_json::json!({ "sql": "SELECT 1" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // The gateway (pid 1) runs as 10001, and the root is read-only to it.
    let status = stdout(&script(
        &["podman", "exec", &name, "cat", "/proc/1/status"],
        &[],
    ));
    let uids = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>();
    assert_eq!(uids, ["10001"; 4], "{status}");
    for path in ["/x", "/opt/duckgate/x", "/tmp/x", "/etc/x"] {
        let out = Command::new(SCRIPT)
            .args(["podman", "exec", "--user", "0", &name, "touch", path])
            .output()
            .unwrap();
        assert!(
            !out.status.success()
                && String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
            "{path} is writable in the container: {out:?}"
        );
    }
    // Issues 37 and 57: no package manager (apt nor dpkg), no perl, no
    // bash, no program that changes who runs it, no setuid or setgid file;
    // the shell is dash. (`ls` of each name, in every bin directory.)
    let mut names = String::new();
    for dir in ["/usr/bin", "/usr/sbin", "/bin", "/sbin"] {
        for tool in [
            "apt", "apt-get", "dpkg", "perl", "bash", "su", "runuser", "setpriv", "sudo", "mount",
            "umount", "passwd", "chsh", "chfn", "newgrp", "gpasswd", "login", "useradd",
        ] {
            names.push_str(&format!(" {dir}/{tool}"));
        }
    }
    let found = stdout(&script(
        &[
            "podman",
            "exec",
            "--user",
            "0",
            &name,
            "sh",
            "-c",
            &format!(
                "ls -d{names} 2>/dev/null; find / -xdev -type f -perm /6000 2>/dev/null; true"
            ),
        ],
        &[],
    ));
    assert!(found.trim().is_empty(), "in the image: {found}");
    let shell = stdout(&script(
        &["podman", "exec", &name, "readlink", "-f", "/bin/sh"],
        &[],
    ));
    assert_eq!(shell, "/usr/bin/dash");
    // Its size, for the record (docs/history.md).
    let size = stdout(&script(
        &["podman", "image", "inspect", "--format", "{{.Size}}", TAG],
        &[],
    ));
    eprintln!("image size: {size} bytes");
    // The data directory is where DuckDB's files went.
    assert!(dir.path().join("data").is_dir());
    // The image's own HEALTHCHECK passes inside the container.
    let hc = stdout(&script(&["podman", "healthcheck", "run", &name], &[]));
    assert!(hc.is_empty() || hc.contains("healthy"), "{hc}");
    drop(container);
    eprintln!("image test done in {:.0?}", started.elapsed());
}
