//! The on-call kit in deploy/monitoring: Prometheus's own `promtool` checks
//! the alert rules and runs their unit tests (every alert tested firing),
//! checks every expression of the Grafana dashboard, and every series either
//! names is one a running gateway (with S3, shared state and an S3 spool)
//! exposes, with HELP, but those [`PROPOSED`] lists.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{self, Postgres, S3Server};

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/monitoring");
const PASSWORD: &str = "state-pw-7c1e4a";

fn promtool(args: &[&str], dir: &Path) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool: scripts/test-env pg installs Debian's prometheus");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The metric names (`duckgate_*`, `process_*`) an expression reads.
fn names_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in expr.match_indices(['d', 'p']) {
        let rest = &expr[i..];
        if !(rest.starts_with("duckgate_") || rest.starts_with("process_")) {
            continue;
        }
        if i > 0 && expr[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let name = name
            .strip_suffix("_bucket")
            .map(str::to_string)
            .unwrap_or(name);
        out.push(name);
    }
    out
}

/// Series the alerts read before a gateway exports them, with who adds
/// them: the alerts are written against these names and tested with
/// promtool; once a gateway exports one, the test fails until it is taken
/// off this list (and then checked like every other series). Empty since
/// issue 57 brought `duckgate_statements_lost_total{reason}` and
/// `duckgate_http_client_timeouts_total{route}`.
const PROPOSED: [&str; 0] = [];

/// The label names of a series written `name{a="x",b="y"}` (a scrape's
/// line or a promtool input series), values skipped however they read
/// (`route="/query/{format}"`).
fn label_names(series: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let Some(start) = series.find('{') else {
        return out;
    };
    let mut rest = &series[start + 1..];
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().trim_start_matches(',').trim();
        out.insert(name.to_string());
        // The quoted value, with its escapes.
        let value = &rest[eq + 1..];
        let mut chars = value.char_indices().skip(1);
        let mut end = value.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &value[end..];
        if rest.trim_start().starts_with('}') {
            break;
        }
    }
    out
}

#[test]
fn label_names_read_values_with_braces_and_escapes() {
    let names = label_names(
        r#"duckgate_http_requests_total{route="/query/{format}",method="GET",status="200"} 3"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["method", "route", "status"]
    );
    let names = label_names(r#"x{a="say \"hi\", b=1",b="2"}"#);
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["a", "b"]);
    assert!(label_names("duckgate_pool_size 6").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs Debian's prometheus (promtool), PostgreSQL 15 and the test venv; scripts/test installs them"]
async fn alert_rules_and_dashboard_check_and_name_real_series() {
    let dir = PathBuf::from(MONITORING);
    promtool(&["check", "rules", "alerts.yml"], &dir);
    promtool(&["test", "rules", "alerts_test.yml"], &dir);
    // Every alert has a unit test in which it fires.
    let alerts = std::fs::read_to_string(dir.join("alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("alerts_test.yml")).unwrap();
    for name in alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        let fires = tests
            .split("alertname: ")
            .skip(1)
            .any(|case| case.starts_with(&format!("{name}\n")) && case.contains("exp_labels"));
        assert!(fires, "alerts_test.yml never expects {name} to fire");
    }

    // Every dashboard expression, with Grafana's variables filled in, as a
    // recording rule promtool parses.
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("dashboard.json")).unwrap())
            .unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().clone())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 16, "{exprs:?}");
    let tmp = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "5m")
            .replace("$__range", "1h")
            .replace("$instance", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:panel{i}\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    common::write_file(tmp.path(), "dashboard-rules.yml", &rules);
    promtool(&["check", "rules", "dashboard-rules.yml"], tmp.path());

    // Every series they read exists on a gateway with every dependency.
    let alerts = std::fs::read_to_string(dir.join("alerts.yml")).unwrap();
    let mut wanted: Vec<String> = exprs.iter().flat_map(|e| names_in(e)).collect();
    wanted.extend(names_in(&alerts));
    wanted.sort();
    wanted.dedup();
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let g = s3
        .app(900)
        .env("DUCKGATE_STATE_DSN", pg.dsn())
        .env("DUCKGATE_SPOOL_URL", "s3://duckgate-test/spool/")
        .env("DUCKGATE_SPOOL_ORPHAN_GRACE_MS", 4000)
        .start();
    g.query_ok("SELECT 1").await;
    let _ = g.query(serde_json::json!({"sql": "SELEC 1"})).await;
    let scrape = common::eventually("every series", Duration::from_secs(30), || async {
        let m = g.get_text("/metrics").await;
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|n| !PROPOSED.contains(&n.as_str()))
            .filter(|n| !m.contains(&format!("# HELP {n} ")))
            .collect();
        if missing.is_empty() {
            Ok(m)
        } else {
            Err(format!("{missing:?}"))
        }
    })
    .await;
    assert!(scrape.contains("duckgate_dependency_up{dependency=\"spool\"}"));
    // The promtool tests feed the alerts series with the labels the
    // gateway's own have (an alert that groups or names a label the gateway
    // does not set never fires, and its test would not show it): each
    // input series' label names, but those Prometheus adds, are among
    // those of one of the gateway's series of that name.
    for line in tests.lines() {
        let Some(series) = line.trim().strip_prefix("- series: '") else {
            continue;
        };
        let name: String = series
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.starts_with("duckgate_") || PROPOSED.contains(&name.as_str()) {
            continue;
        }
        let mut wanted = label_names(series);
        wanted.remove("instance");
        wanted.remove("job");
        let exported: Vec<_> = scrape
            .lines()
            .filter(|l| {
                l.strip_prefix(name.as_str())
                    .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
            })
            .map(label_names)
            .collect();
        assert!(
            exported.iter().any(|have| wanted.is_subset(have)),
            "alerts_test.yml feeds {name} with labels {wanted:?}; the gateway's have {exported:?}"
        );
    }
    for name in PROPOSED {
        assert!(
            wanted.iter().any(|w| w == name),
            "{name} is proposed but no alert reads it"
        );
        assert!(
            !scrape.contains(&format!("# HELP {name} ")),
            "the gateway exports {name} now: take it off PROPOSED in tests/it/pg/monitoring.rs"
        );
    }
}
