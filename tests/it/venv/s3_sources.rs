//! Other credential sources and several secrets: web identity from a token
//! file (re-read at each refresh), a TOML file with two scoped secrets, and
//! the base credentials of assume-role from a file rather than the process
//! environment.
//!
//! The gateways run in the test's process (`spawn_app`); start-up refusals,
//! whose exit code is part of what is checked, run as processes.

use crate::common;

use crate::common::{Endpoint, Gateway, S3Server};
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-0123456789";

async fn admin(g: &Endpoint, method: &str, path: &str) -> Value {
    admin_answering(g, method, path, 200).await
}

/// An admin call whose status is `want` (207: a partial outcome, such as a
/// secret whose rotation failed).
async fn admin_answering(g: &Endpoint, method: &str, path: &str, want: u16) -> Value {
    let req = match method {
        "POST" => g.client.post(g.url(path)),
        _ => g.client.get(g.url(path)),
    };
    let r = req.bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(r.status(), want, "{method} {path}");
    r.json().await.unwrap()
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn web_identity_reads_the_token_file_at_each_refresh() {
    let s3 = S3Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let token = common::write_file(dir.path(), "token", "first-token\n");
    // Same emulation settings as assume-role, without base credentials; the
    // token file selects web identity (the call is not signed).
    let g = s3
        .settings(3600)
        .env("DUCKGATE_S3_WEB_IDENTITY_TOKEN_FILE", token.display())
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .spawn_app()
        .await;
    let v = g
        .query_ok("SELECT count(*) AS n FROM read_csv('s3://duckgate-test/data/small.csv')")
        .await;
    assert_eq!(v["rows"], json!([[3]]));
    let secrets = admin(&g, "GET", "/admin/secrets").await;
    assert_eq!(secrets["secrets"][0]["source"], "web-identity");

    // A missing token file makes the refresh fail with a clear class, and the
    // installed credentials keep serving.
    std::fs::remove_file(&token).unwrap();
    let r = admin_answering(&g, "POST", "/admin/secrets/rotate", 207).await;
    assert!(
        r["errors"][0]
            .as_str()
            .unwrap()
            .contains("web identity token file"),
        "{r}"
    );
    assert_eq!(
        g.query_ok("SELECT count(*) FROM read_csv('s3://duckgate-test/data/small.csv')")
            .await["rows"],
        json!([[3]])
    );

    // Restored: the next refresh reads the new file.
    common::write_file(dir.path(), "token", "second-token\n");
    let r = admin(&g, "POST", "/admin/secrets/rotate").await;
    assert!(r["errors"].is_null() || r["errors"] == json!([]), "{r}");
    assert_eq!(r["secrets"][0]["epoch"], 2);
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_toml_file_configures_several_scoped_secrets() {
    let s3 = S3Server::start(&[]);
    // Seed an object in the second bucket.
    let c = reqwest::Client::new();
    c.post(format!(
        "{}/put?bucket=duckgate-other&key=o.csv",
        s3.control
    ))
    .body("a\n41\n")
    .send()
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut toml = String::new();
    for (name, bucket) in [
        ("test_bucket", "duckgate-test"),
        ("other_bucket", "duckgate-other"),
    ] {
        toml.push_str(&format!(
            "[[secret]]\nname = \"{name}\"\nsource = \"assume-role\"\nrole_arn = \"{}\"\nsession_duration_secs = 3600\n\
             region = \"{}\"\nendpoint = \"{}\"\nurl_style = \"path\"\nuse_ssl = false\nscope = [\"s3://{bucket}/\"]\nsts_endpoint = \"{}\"\n\
             base_credentials_file = \"{}\"\n\n",
            s3.str("role_arn"),
            s3.str("region"),
            s3.str("endpoint"),
            s3.str("sts_endpoint"),
            s3.base_credentials_file.display()
        ));
    }
    let file = common::write_file(dir.path(), "secrets.toml", &toml);
    let g = Gateway::builder()
        .env("DUCKGATE_EXTENSION_DIR", common::extension_dir())
        .env("DUCKGATE_CONFIG", file.display())
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .spawn_app()
        .await;
    let v = g
        .query_ok("SELECT count(*) FROM read_csv('s3://duckgate-test/data/small.csv')")
        .await;
    assert_eq!(v["rows"], json!([[3]]));
    let v = g
        .query_ok("SELECT a + 1 AS b FROM read_csv('s3://duckgate-other/o.csv')")
        .await;
    assert_eq!(v["rows"], json!([[42]]));
    let secrets = admin(&g, "GET", "/admin/secrets").await;
    assert_eq!(secrets["secrets"].as_array().unwrap().len(), 2);
    // Rotate one by name: only its epoch moves.
    let r = admin(&g, "POST", "/admin/secrets/rotate?name=other_bucket").await;
    assert_eq!(r["secrets"].as_array().unwrap().len(), 1);
    assert_eq!(r["secrets"][0]["epoch"], 2);
    let all = admin(&g, "GET", "/admin/secrets").await;
    let test_epoch = all["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "test_bucket")
        .unwrap()["epoch"]
        .clone();
    assert_eq!(test_epoch, 1);
    let h = g.health().await;
    assert_eq!(h["credential_epoch"], 3);
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn sessions_too_short_for_the_longest_query_are_refused_at_start() {
    let s3 = S3Server::start(&[]);
    let err = match s3
        .app(60)
        .env("DUCKGATE_MAX_QUERY_TIMEOUT_MS", 300000)
        .try_start()
    {
        Ok(_) => panic!("must refuse"),
        Err(e) => e,
    };
    assert_eq!(err.0, Some(2));
    let text = err.1.join("\n");
    assert!(
        text.contains("DUCKGATE_S3_SESSION_DURATION_SECS") && text.contains("longest query"),
        "{text}"
    );
    // A missing extension is a clear start-up error that says how to install it.
    let err = match s3
        .app(3600)
        .env("DUCKGATE_EXTENSION_DIR", "/nonexistent")
        .try_start()
    {
        Ok(_) => panic!("must refuse"),
        Err(e) => e,
    };
    assert!(err.1.join("\n").contains("duckdb-extension-httpfs==1.5.5"));
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn the_base_credentials_file_signs_sts() {
    let s3 = S3Server::start(&[]);
    // In this process, which has no AWS_* variables of the emulation: the
    // file's keys sign AssumeRole and the secret reads the bucket.
    let g = s3
        .app(3600)
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .spawn_app()
        .await;
    let v = g
        .query_ok("SELECT count(*) AS n FROM read_csv('s3://duckgate-test/data/small.csv')")
        .await;
    assert_eq!(v["rows"], json!([[3]]));
    let secrets = admin(&g, "GET", "/admin/secrets").await;
    assert_eq!(secrets["secrets"][0]["source"], "assume-role");
}

/// Processes whose environment holds the right base keys (the standard
/// chain would find them) and whose file does not: the file is what is
/// used, so start-up fails (exit 2) with a class, never a key.
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_base_credentials_file_that_cannot_sign_stops_start_up_whatever_the_environment() {
    let s3 = S3Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong-keys");
    common::write_credentials_file(
        &wrong,
        "AKIAWRONGBASEKEY0000",
        "wrong-base-secret-do-not-log",
    );
    let other = common::write_file(
        dir.path(),
        "other-profile",
        "[other]\naws_access_key_id = AKIAOTHERPROFILE0000\naws_secret_access_key = other-profile-secret-do-not-log\n",
    );
    let missing = dir.path().join("missing");
    let start = |file: &std::path::Path| {
        let b = s3
            .gateway(3600)
            .env("DUCKGATE_S3_BASE_CREDENTIALS_FILE", file.display());
        tokio::task::spawn_blocking(move || match b.try_start() {
            Ok(_) => panic!("started without usable base credentials"),
            Err((code, log)) => (code, log.join("\n")),
        })
    };
    let (wrong_keys, other_profile, missing_file) =
        tokio::join!(start(&wrong), start(&other), start(&missing));
    // Key ids too: the SDK's profile-file provider logs them whole (at
    // `info`, which these processes log).
    let secrets = [
        "wrong-base-secret",
        "AKIAWRONGBASEKEY",
        "other-profile-secret",
        "AKIAOTHERPROFILE",
        &s3.str("secret_access_key"),
        &s3.str("access_key_id"),
    ];
    for (name, run, expect) in [
        // STS refused the file's keys (the emulation does not know them).
        (
            "wrong keys",
            wrong_keys.unwrap(),
            &["STS AssumeRole: service error", "(HTTP 403)"][..],
        ),
        (
            "no [default] profile",
            other_profile.unwrap(),
            &["holds no credentials for profile `default`"],
        ),
        (
            "missing file",
            missing_file.unwrap(),
            &["DUCKGATE_S3_BASE_CREDENTIALS_FILE: cannot read"],
        ),
    ] {
        let (code, log) = run;
        eprintln!(
            "base credentials file, {name}: exit {code:?}: {}",
            log.lines().last().unwrap_or("")
        );
        assert_eq!(code, Some(2), "{name}: {log}");
        for e in expect {
            assert!(log.contains(e), "{name}: {log}");
        }
        for s in secrets {
            assert!(
                !log.contains(&s[..s.len().min(16)]),
                "{name}: a key reached the log"
            );
        }
    }
}
