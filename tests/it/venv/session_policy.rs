//! Credentials that can do no more than the scope (issue 20): the gateway
//! passes an STS session policy built from its S3 scope, so the keys STS
//! returns read the scope and nothing else, whatever the role allows. The
//! emulation enforces session policies as AWS does (the role itself allows
//! `s3:*` on everything), and a key that leaked out of the gateway is tried
//! directly against S3.

use crate::common;

use crate::common::S3Server;

/// Tries S3 directly with the session's keys (argv: endpoint, key id,
/// secret, token); prints one line per attempt: `name ok` or `name denied`.
const WITH_LEAKED_KEYS: &str = r#"
import sys, boto3, botocore
endpoint, key, secret, token = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key, aws_secret_access_key=secret, aws_session_token=token,
                  config=botocore.config.Config(s3={"addressing_style": "path"}))
def attempt(name, call):
    try:
        call()
        print(name, "ok")
    except botocore.exceptions.ClientError as e:
        print(name, "denied" if e.response["Error"]["Code"] == "AccessDenied" else e.response["Error"]["Code"])
attempt("read-in-scope", lambda: s3.get_object(Bucket="duckgate-test", Key="data/small.csv")["Body"].read())
attempt("list-in-scope", lambda: s3.list_objects_v2(Bucket="duckgate-test", Prefix="data/"))
attempt("read-other-bucket", lambda: s3.get_object(Bucket="duckgate-other", Key="private.csv")["Body"].read())
attempt("read-outside-prefix", lambda: s3.get_object(Bucket="duckgate-test", Key="private/x.csv")["Body"].read())
attempt("list-bucket-root", lambda: s3.list_objects_v2(Bucket="duckgate-test", Prefix=""))
attempt("write-in-scope", lambda: s3.put_object(Bucket="duckgate-test", Key="data/planted.csv", Body=b"x"))
attempt("delete-in-scope", lambda: s3.delete_object(Bucket="duckgate-test", Key="data/small.csv"))
"#;

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn leaked_session_keys_read_the_scope_and_nothing_else() {
    let s3 = S3Server::start(&[]);
    for (bucket, key) in [
        ("duckgate-other", "private.csv"),
        ("duckgate-test", "private/x.csv"),
    ] {
        let r = reqwest::Client::new()
            .post(format!(
                "{}/__control/put?bucket={bucket}&key={key}",
                s3.str("sts_endpoint")
            ))
            .body("secret,1\n")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    let g = s3
        .app(900)
        .env("DUCKGATE_S3_SCOPE", "s3://duckgate-test/data/")
        .start();
    // The gateway reads its scope as before: a file and a glob (a listing).
    let v = g
        .query_ok("SELECT count(*) AS n FROM read_csv('s3://duckgate-test/data/small.csv')")
        .await;
    assert_eq!(v["rows"][0][0], 3);
    let v = g
        .query_ok("SELECT count(*) AS n FROM glob('s3://duckgate-test/data/*')")
        .await;
    assert!(v["rows"][0][0].as_i64().unwrap() >= 1, "{v}");

    // The session STS gave the gateway carries a policy of the scope.
    let sessions = s3.control("GET", "sessions").await;
    let session = sessions["sessions"]
        .as_array()
        .unwrap()
        .last()
        .expect("an assumed-role session")
        .clone();
    let policy = session["policy"].as_str().expect("a session policy");
    assert!(
        policy.contains("arn:aws:s3:::duckgate-test/data/*"),
        "{policy}"
    );
    assert!(!policy.contains("duckgate-other"), "{policy}");

    // Its keys, used outside the gateway, reach the scope and nothing else.
    let out = std::process::Command::new(common::test_python())
        .arg("-c")
        .arg(WITH_LEAKED_KEYS)
        .args([
            &s3.str("sts_endpoint"),
            session["access_key_id"].as_str().unwrap(),
            session["secret_access_key"].as_str().unwrap(),
            session["session_token"].as_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (attempt, want) in [
        ("read-in-scope", "ok"),
        ("list-in-scope", "ok"),
        ("read-other-bucket", "denied"),
        ("read-outside-prefix", "denied"),
        ("list-bucket-root", "denied"),
        ("write-in-scope", "denied"),
        ("delete-in-scope", "denied"),
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("{attempt} {want}")),
            "{attempt}: expected {want}\n{stdout}"
        );
    }
    // The gateway's own reads were never denied.
    let stats = s3.control("GET", "stats").await;
    assert_eq!(
        stats["s3_session_policy_denials"].as_u64(),
        Some(5),
        "{stats}"
    );
}
