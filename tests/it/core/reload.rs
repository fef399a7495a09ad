//! Tokens change without a restart (issue 37): SIGHUP, or a token or key
//! file that changed, reloads the query tokens, the admin token and the URL
//! signing key at once; a request in flight keeps running; a reload that
//! fails keeps the tokens there were; the log names what changed and never
//! a token. SIGHUP used to kill the process (exit 129, no drain).

use std::time::{Duration, Instant};

use crate::common::{self, Gateway, BUSY_MARGIN};
use serde_json::json;

const ALICE: &str = "alice-token-aaaaaaaaaaaa";
const BOB: &str = "bob-token-bbbbbbbbbbbbbb";
const CAROL: &str = "carol-token-cccccccccccc";
const ADMIN_1: &str = "admin-one-0123456789abcdef";
const ADMIN_2: &str = "admin-two-0123456789abcdef";

async fn status(g: &Gateway, token: &str, path: &str) -> u16 {
    g.client
        .get(g.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn hangup(g: &Gateway) {
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &g.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

async fn until(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_admin_token_and_signing_key_reload_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = common::write_file(dir.path(), "tokens", &format!("alice:{ALICE}\nbob:{BOB}\n"));
    let admin = common::write_file(dir.path(), "admin", &format!("{ADMIN_1}\n"));
    let key = common::write_file(dir.path(), "key", &"k".repeat(40));
    let mut g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS_FILE", tokens.display())
        .env("DUCKGATE_ADMIN_TOKEN_FILE", admin.display())
        .env("DUCKGATE_URL_SIGNING_KEY_FILE", key.display())
        .start();
    assert_eq!(status(&g, ALICE, "/queries").await, 200);
    assert_eq!(status(&g, ADMIN_1, "/admin/pool").await, 200);
    // A statement and a link signed with the first key.
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "kept")
        .json(&json!({"sql": "SELECT 42 AS x", "wait_ms": 30_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let link: serde_json::Value = g
        .client
        .post(g.url("/statements/kept/links?format=csv"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let link = link["url"].as_str().unwrap().to_string();
    // A query in flight across the reload.
    let inflight = {
        let (client, url) = (g.client.clone(), g.url("/query"));
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(BOB)
                .json(&json!({"sql": common::sleeping_sql(Duration::from_secs(5))}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    // It is running (listed as bob's) when the files change.
    until("bob's query in flight", BUSY_MARGIN, async || {
        let (status, v) = g.get("/queries", BOB).await;
        status == 200 && v["queries"].as_array().is_some_and(|q| !q.is_empty())
    })
    .await;

    // Bob out, carol in, a new admin token and signing key; SIGHUP.
    std::fs::write(&tokens, format!("alice:{ALICE}\ncarol:{CAROL}\n")).unwrap();
    std::fs::write(&admin, format!("{ADMIN_2}\n")).unwrap();
    std::fs::write(&key, "n".repeat(40)).unwrap();
    hangup(&g);
    until("carol's token works", BUSY_MARGIN, async || {
        status(&g, CAROL, "/queries").await == 200
    })
    .await;
    assert_eq!(status(&g, BOB, "/queries").await, 401);
    assert_eq!(status(&g, ALICE, "/queries").await, 200);
    assert_eq!(status(&g, ADMIN_1, "/admin/pool").await, 401);
    assert_eq!(status(&g, ADMIN_2, "/admin/pool").await, 200);
    assert_eq!(
        inflight.await.unwrap(),
        200,
        "the request in flight was cut"
    );
    // The link signed with the previous key still reads its statement.
    let r = g.client.get(&link).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "x\n42\n");
    // The process lives, and said what changed without any token.
    assert!(
        g.child.try_wait().unwrap().is_none(),
        "SIGHUP ended the process"
    );
    let log = g.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("reloaded") && l.contains("carol"))
        .unwrap_or_else(|| panic!("no reload line:\n{log}"));
    assert!(
        line.contains("query token carol added") && line.contains("query token bob removed"),
        "{line}"
    );
    for secret in [ALICE, BOB, CAROL, ADMIN_1, ADMIN_2] {
        assert!(!log.contains(secret), "a token reached the log");
    }

    // A file changed without a signal is picked up too.
    std::fs::write(&tokens, format!("alice:{ALICE}\n")).unwrap();
    until("carol's token goes", BUSY_MARGIN, async || {
        status(&g, CAROL, "/queries").await == 401
    })
    .await;

    // A broken file keeps the tokens there were.
    std::fs::write(&tokens, "bad name:short\n").unwrap();
    hangup(&g);
    until("the refusal is logged", BUSY_MARGIN, async || {
        g.log_text().contains("reload refused")
    })
    .await;
    assert_eq!(status(&g, ALICE, "/queries").await, 200);
    let scrape = g.get_text("/metrics").await;
    assert!(
        common::metric(
            &scrape,
            "duckgate_config_reloads_total{outcome=\"refused\"}"
        ) >= 1.0
    );
    assert!(common::metric(&scrape, "duckgate_config_reloads_total{outcome=\"ok\"}") >= 2.0);
    // And SIGTERM still drains and exits cleanly.
    assert_eq!(g.terminate(Duration::from_secs(30)), Some(0));
}

#[test]
fn malformed_and_weak_tokens_are_refused_beyond_loopback() {
    for (tokens, listen, wanted) in [
        (
            "bad name:abcdefghijklmnopqrst",
            "127.0.0.1:0",
            "name is not",
        ),
        ("alice:", "127.0.0.1:0", "no token after"),
        ("x", "0.0.0.0:0", "shorter than 16"),
        ("alice:short", "0.0.0.0:0", "shorter than 16"),
    ] {
        let (code, log) = match Gateway::builder()
            .env("DUCKGATE_QUERY_TOKENS", tokens)
            .env("DUCKGATE_LISTEN", listen)
            .try_start()
        {
            Ok(_) => panic!("{tokens} on {listen} started"),
            Err(e) => e,
        };
        assert_eq!(code, Some(2), "{tokens}");
        let text = log.join("\n");
        assert!(text.contains(wanted), "{tokens}: {text}");
        assert!(
            !text.contains("abcdefghijklmnopqrst"),
            "the token was printed"
        );
    }
    // A short token on loopback is the developer's choice.
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", "x")
        .try_start();
    assert!(g.is_ok());
}

/// Roles reload with the tokens, at once and whole (issue 55): a grant
/// revoked or a filter narrowed holds for the next statement, and the
/// answer of `POST /admin/reload` says what changed. A reload that would
/// move a token to another name, leave no query token, or leave a member
/// naming no token is refused, and the current tokens and roles stay. A
/// bare token keeps its name, and its statements, when the line before it
/// goes (it was named by its place).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_reload_whole_and_a_reload_that_would_move_or_lock_out_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.duckdb");
    duckdb::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE t AS SELECT i AS id FROM range(10) r(i);
             CREATE TABLE u AS SELECT i AS id FROM range(4) r(i);",
        )
        .unwrap();
    let role = |read: &str, rows: &str, member: &str| {
        format!(
            "[[role]]\nname = \"r\"\nmembers = [\"{member}\"]\nread = [{read}]\n[role.rows]\n\"ops.main.t\" = \"{rows}\"\n"
        )
    };
    let toml = common::write_file(
        dir.path(),
        "roles.toml",
        &role("\"ops.main.t\", \"ops.main.u\"", "id < 5", "alice"),
    );
    const BARE_1: &str = "bare-one-0123456789abcdef";
    const BARE_2: &str = "bare-two-0123456789abcdef";
    let tokens = common::write_file(
        dir.path(),
        "tokens",
        &format!("{BARE_1}\n{BARE_2}\nalice:{ALICE}\nbob:{BOB}\n"),
    );
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS_FILE", tokens.display())
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN_1)
        .env("DUCKGATE_DATABASE", db.display())
        .env("DUCKGATE_CONFIG", toml.display())
        .start();
    let count = async |token: &str, table: &str| -> (u16, serde_json::Value) {
        g.run_sql(token, &format!("SELECT count(*) FROM {table}"))
            .await
    };
    // The answer, and whether its status says what its list says (a
    // refused reload is a partial outcome: 207).
    let reload = async || -> serde_json::Value {
        let r = g
            .client
            .post(g.url("/admin/reload"))
            .bearer_auth(ADMIN_1)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: serde_json::Value = r.json().await.unwrap();
        let want = if v["replicas"][0]["outcome"] == "ok" {
            200
        } else {
            207
        };
        assert_eq!(status, want, "{v}");
        v
    };
    let rows = |v: &(u16, serde_json::Value)| (v.0, v.1["rows"].clone());
    assert_eq!(rows(&count(ALICE, "t").await), (200, json!([[5]])));
    // A statement of the second bare token, then the first token's line goes.
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(BARE_2)
        .header("duckgate-query-id", "bare-kept")
        .json(&json!({"sql": "SELECT 1 AS x", "wait_ms": 30_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    std::fs::write(&tokens, format!("{BARE_2}\nalice:{ALICE}\nbob:{BOB}\n")).unwrap();
    let v = reload().await;
    assert_eq!(v["replicas"][0]["outcome"], "ok", "{v}");
    assert_eq!(v["changed"].as_array().unwrap().len(), 1, "{v}");
    assert!(
        v["changed"][0]
            .as_str()
            .unwrap()
            .starts_with("query token token-"),
        "{v}"
    );
    let (status, body) = g.get("/statements/bare-kept", BARE_2).await;
    assert_eq!(
        status, 200,
        "the second bare token lost its statement: {body}"
    );
    assert!(
        body["owner"]
            .as_str()
            .is_none_or(|o| o.starts_with("token-")),
        "{body}"
    );
    // A narrower filter and a revoked table hold for the next statement.
    std::fs::write(&toml, role("\"ops.main.t\"", "id < 3", "alice")).unwrap();
    let v = reload().await;
    assert_eq!(v["changed"], json!(["role r changed"]), "{v}");
    assert_eq!(rows(&count(ALICE, "t").await), (200, json!([[3]])));
    let (status, body) = count(ALICE, "u").await;
    assert_eq!(status, 400, "u was revoked: {body}");
    // Refused, the current ones stay: a member naming no token,
    for (tokens_text, toml_text, why) in [
        (
            format!("{BARE_2}\nalice:{ALICE}\nbob:{BOB}\n"),
            role("\"ops.main.t\"", "id < 3", "alicia"),
            "member 'alicia'",
        ),
        // two tokens' secrets swapped,
        (
            format!("{BARE_2}\nalice:{BOB}\nbob:{ALICE}\n"),
            role("\"ops.main.t\"", "id < 3", "alice"),
            "does not move a token",
        ),
        // every query token gone.
        (
            String::new(),
            role("\"ops.main.t\"", "id < 3", "alice"),
            "every query token",
        ),
    ] {
        std::fs::write(&tokens, &tokens_text).unwrap();
        std::fs::write(&toml, &toml_text).unwrap();
        let v = reload().await;
        assert_eq!(v["replicas"][0]["outcome"], "failed", "{why}: {v}");
        assert!(
            v["replicas"][0]["errors"][0]
                .as_str()
                .unwrap()
                .contains(why),
            "{v}"
        );
        assert_eq!(v["changed"], json!([]), "{v}");
        assert_eq!(rows(&count(ALICE, "t").await), (200, json!([[3]])), "{why}");
        assert_eq!(rows(&count(BOB, "t").await), (200, json!([[10]])), "{why}");
    }
    let log = g.log_text();
    for secret in [ALICE, BOB, BARE_1, BARE_2, ADMIN_1] {
        assert!(!log.contains(secret), "a token reached the log");
    }
}

/// A role member that names no query token stops start-up, naming it
/// (`alicia` for `alice` would leave `alice` unconfined).
#[test]
fn a_member_naming_no_token_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let toml = common::write_file(
        dir.path(),
        "roles.toml",
        "[[role]]\nname = \"r\"\nmembers = [\"alicia\", \"oidc:someone\"]\nread = [\"memory.main.*\"]\n",
    );
    let (code, log) = match Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
        .env("DUCKGATE_CONFIG", toml.display())
        .try_start()
    {
        Ok(_) => panic!("started with a member naming no token"),
        Err(e) => e,
    };
    assert_eq!(code, Some(2));
    let text = log.join("\n");
    assert!(text.contains("member 'alicia'"), "{text}");
}
