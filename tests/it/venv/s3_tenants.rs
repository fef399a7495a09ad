//! Per-tenant S3 credentials (issue 39): each tenant's prefix has a
//! `[[secret]]` of its own (its own STS session, session policy and
//! rotation) and a named source over it; a role grants each tenant its
//! source. The tenants read their own files through the gateway, each
//! answer DuckDB's over the same bytes; the other tenant's source is a
//! missing name; and the keys STS issued for one tenant, tried directly
//! against S3 as if they leaked, read that tenant's prefix and nothing of
//! the other's. The emulation's role itself allows `s3:*` everywhere: only
//! the session policy built from each secret's scope narrows the keys.

use crate::common;

use crate::common::{Gateway, S3Server};
use serde_json::Value;

const ALICE: &str = "alice-tenant-acme-token-01";
const BOB: &str = "bob-tenant-globex-token-02";
const ADMIN: &str = "admin-tenant-token-0000003";
const TENANTS: [&str; 2] = ["acme", "globex"];

/// Reads one tenant's first file with the keys given (argv: endpoint, key
/// id, secret, token, then the object keys to try); prints `key ok` or
/// `key denied` for each.
const WITH_LEAKED_KEYS: &str = r#"
import sys, boto3, botocore
endpoint, key, secret, token = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key, aws_secret_access_key=secret, aws_session_token=token,
                  config=botocore.config.Config(s3={"addressing_style": "path"}))
for k in sys.argv[5:]:
    try:
        s3.get_object(Bucket="duckgate-test", Key=k)["Body"].read()
        print(k, "ok")
    except botocore.exceptions.ClientError as e:
        print(k, "denied" if e.response["Error"]["Code"] == "AccessDenied" else e.response["Error"]["Code"])
"#;

/// One tenant's files: (object key under the bucket, CSV text).
fn files(tenant: &str, n: i64) -> Vec<(String, String)> {
    (0..2)
        .map(|part| {
            let mut csv = String::from("id,amount,note\n");
            for i in 0..5 {
                let id = n * 100 + part * 10 + i;
                csv.push_str(&format!("{id},{}.25,{tenant}-{part}-{i}\n", id * 3));
            }
            (format!("tenants/{tenant}/orders-{part}.csv"), csv)
        })
        .collect()
}

/// DuckDB's rows for `sql` over local copies (`{dir}` stands for the
/// directory holding a tenant's files), as the gateway's JSON renders them.
fn reference(sql: &str) -> Value {
    crate::common::reference::in_memory(sql)
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn each_tenant_reads_through_keys_that_read_nothing_of_the_others() {
    let s3 = S3Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    for (n, tenant) in TENANTS.iter().enumerate() {
        let local = dir.path().join(tenant);
        std::fs::create_dir_all(&local).unwrap();
        for (key, csv) in files(tenant, n as i64 + 1) {
            let r = client
                .post(format!("{}/put?bucket=duckgate-test&key={key}", s3.control))
                .body(csv.clone())
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            let name = key.rsplit('/').next().unwrap();
            std::fs::write(local.join(name), csv).unwrap();
        }
    }
    let mut toml = String::new();
    for tenant in TENANTS {
        toml.push_str(&format!(
            "[[secret]]\nname = \"{tenant}\"\nsource = \"assume-role\"\nrole_arn = \"{}\"\n\
             session_name = \"duckgate-{tenant}\"\nsession_duration_secs = 3600\n\
             region = \"{}\"\nendpoint = \"{}\"\nurl_style = \"path\"\nuse_ssl = false\n\
             scope = [\"s3://duckgate-test/tenants/{tenant}/\"]\nsts_endpoint = \"{}\"\n\
             base_credentials_file = \"{}\"\n\n\
             [[source]]\nname = \"{tenant}_orders\"\npath = \"s3://duckgate-test/tenants/{tenant}/*.csv\"\n\
             format = \"csv\"\n\n",
            s3.str("role_arn"),
            s3.str("region"),
            s3.str("endpoint"),
            s3.str("sts_endpoint"),
            s3.base_credentials_file.display()
        ));
    }
    toml.push_str(
        "[[role]]\nname = \"acme\"\nmembers = [\"alice\"]\nread = [\"sources.main.acme_orders\"]\n\n\
         [[role]]\nname = \"globex\"\nmembers = [\"bob\"]\nread = [\"sources.main.globex_orders\"]\n",
    );
    let config = common::write_file(dir.path(), "tenants.toml", &toml);
    let g = Gateway::builder()
        .env("DUCKGATE_EXTENSION_DIR", common::extension_dir())
        .env("DUCKGATE_CONFIG", config.display())
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE},bob:{BOB}"))
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .spawn_app()
        .await;
    let mut attempts = 0;

    // Each tenant reads its own source; the answer is DuckDB's over the
    // same bytes.
    for (token, tenant) in [(ALICE, "acme"), (BOB, "globex")] {
        let local = dir.path().join(tenant);
        for template in [
            "SELECT id, amount, note FROM {src} ORDER BY id",
            "SELECT id, amount, note FROM {src} WHERE amount > 400 ORDER BY id DESC",
            "SELECT max(id) AS id, sum(amount) AS amount, min(note) AS note FROM {src}",
        ] {
            let sql = template.replace("{src}", &format!("sources.{tenant}_orders"));
            let want = reference(
                &template.replace("{src}", &format!("read_csv('{}/*.csv')", local.display())),
            );
            let (status, body) = g.run_sql(token, &sql).await;
            assert_eq!(status, 200, "{sql}: {body}");
            assert_eq!(body["rows"], want, "{sql}");
            attempts += 1;
        }
    }
    // The other tenant's source is a name that exists nowhere for them.
    let (missing_status, missing) = g.run_sql(ALICE, "SELECT * FROM sources.no_orders").await;
    for (token, other) in [(ALICE, "globex"), (BOB, "acme")] {
        let (status, body) = g
            .run_sql(token, &format!("SELECT * FROM sources.{other}_orders"))
            .await;
        assert_eq!(status, missing_status, "{body}");
        assert_eq!(body["type"], missing["type"], "{body}");
        attempts += 1;
    }

    // Two secrets, one STS session each (so far), each session's policy the
    // tenant's prefix.
    let sessions = s3.control("GET", "sessions").await;
    let sessions = sessions["sessions"].as_array().unwrap().clone();
    assert!(sessions.len() >= 2, "{sessions:?}");
    let objects: Vec<String> = TENANTS
        .iter()
        .enumerate()
        .map(|(n, t)| files(t, n as i64 + 1)[0].0.clone())
        .collect();
    let mut served = std::collections::BTreeSet::new();
    for session in &sessions {
        let policy = session["policy"].as_str().expect("a session policy");
        let out = std::process::Command::new(common::test_python())
            .arg("-c")
            .arg(WITH_LEAKED_KEYS)
            .arg(s3.str("sts_endpoint"))
            .args(
                ["access_key_id", "secret_access_key", "session_token"]
                    .map(|k| session[k].as_str().unwrap().to_string()),
            )
            .args(&objects)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The keys read exactly the tenant their policy names.
        let tenant = TENANTS
            .iter()
            .find(|t| policy.contains(&format!("tenants/{t}/")))
            .unwrap_or_else(|| panic!("a tenant's prefix in {policy}"));
        for (t, object) in TENANTS.iter().zip(&objects) {
            let want = if t == tenant { "ok" } else { "denied" };
            assert!(
                stdout.lines().any(|l| l == format!("{object} {want}")),
                "keys of {tenant}'s session on {object}: expected {want}\n{stdout}"
            );
            attempts += 1;
        }
        served.insert(*tenant);
    }
    assert_eq!(served.len(), 2, "a session for each tenant");

    // Rotation is per secret: acme's keys change, globex's stay, and both
    // tenants still read.
    let (status, r) = g
        .call(
            reqwest::Method::POST,
            "/admin/secrets/rotate?name=acme",
            ADMIN,
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let (status, secrets) = g.get("/admin/secrets", ADMIN).await;
    assert_eq!(status, 200, "{secrets}");
    let epoch = |name: &str| {
        secrets["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()["epoch"]
            .as_u64()
            .unwrap()
    };
    assert_eq!((epoch("acme"), epoch("globex")), (2, 1), "{secrets}");
    for (token, tenant) in [(ALICE, "acme"), (BOB, "globex")] {
        let sql = "SELECT id, amount, note FROM {src} ORDER BY id";
        let want = reference(&sql.replace(
            "{src}",
            &format!("read_csv('{}/*.csv')", dir.path().join(tenant).display()),
        ));
        let (status, body) = g
            .run_sql(
                token,
                &sql.replace("{src}", &format!("sources.{tenant}_orders")),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["rows"], want);
        attempts += 1;
    }
    assert!(attempts >= 14, "{attempts}");
}
