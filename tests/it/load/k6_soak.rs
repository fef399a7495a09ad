//! The soak path itself, on every CI run: `k6/run-soak` with a 60-second run
//! and 20-second STS sessions (so the rotator refreshes several times while
//! k6 drives local and S3 queries, probes and an admin rotation), and a
//! 40-second `--lake` run that reads a DuckLake on S3 as well, and a
//! 45-second `--replicas 3` run: three gateways sharing PostgreSQL state and
//! an S3 spool behind HAProxy, statements polled and paged across them (with
//! a control run whose replicas share nothing, where the same check fails).
//!
//! Needs DUCKGATE_TEST_K6, DUCKGATE_TEST_PYTHON and DUCKGATE_EXTENSION_DIR
//! (scripts/test sets them); the gateway is this build's binary.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The probes' p99 bound in these short runs (see `run_soak_as`).
const HEALTHZ_P99_MS: u32 = 250;

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run the suite with scripts/test, or \
             `eval \"$(scripts/test-env)\"; export DUCKGATE_TEST_PYTHON DUCKGATE_EXTENSION_DIR DUCKGATE_TEST_K6`"
        )
    })
}

/// Runs `k6/run-soak --duration <duration> --session-secs 20 <extra>` with
/// this build's binary and returns its JSON summary and its output, once it
/// passed.
fn run_soak(duration: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let (status, summary, output, context) = run_soak_as(duration, extra, &[]);
    assert!(
        status.success(),
        "k6/run-soak exited with {status}\n{context}"
    );
    let summary = summary.unwrap_or_else(|| panic!("no summary\n{context}"));
    (summary, output)
}

/// As `run_soak`, with `env` added, whatever its outcome: its exit status,
/// its JSON summary (if it wrote one), its output, and the output with the
/// gateway logs' last lines for a failure message.
fn run_soak_as(
    duration: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (
    std::process::ExitStatus,
    Option<serde_json::Value>,
    String,
    String,
) {
    // One soak at a time: two would share the two cores and each other's
    // latency thresholds.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let k6 = required_env("DUCKGATE_TEST_K6");
    let python = required_env("DUCKGATE_TEST_PYTHON");
    let ext_dir = required_env("DUCKGATE_EXTENSION_DIR");
    assert!(
        Path::new(&k6).is_file(),
        "DUCKGATE_TEST_K6={k6} does not exist"
    );
    assert!(
        Path::new(&python).is_file(),
        "DUCKGATE_TEST_PYTHON={python} does not exist"
    );

    let dir = tempfile::tempdir().unwrap();
    let summary_path = dir.path().join("summary.json");
    let work = dir.path().join("work");
    let out_path = dir.path().join("run-soak.out");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/k6/run-soak");

    // One file for both streams (a shared offset keeps them interleaved).
    let out = std::fs::File::create(&out_path).unwrap();
    let started = Instant::now();
    let mut child = Command::new(script)
        .args(["--duration", duration, "--session-secs", "20"])
        .args(extra)
        .arg("--summary")
        .arg(&summary_path)
        .arg("--work-dir")
        .arg(&work)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_duckgate"))
        .env("DUCKGATE_TEST_K6", &k6)
        .env("DUCKGATE_TEST_PYTHON", &python)
        .env("DUCKGATE_EXTENSION_DIR", &ext_dir)
        // The soak's latency goals (k6/soak.js's defaults: probe p99 25 ms,
        // local p95 50 ms) are a 20-minute run's; a one-minute run has ~60
        // probes, so its p99 is its slowest probe, and one slow probe on
        // this VM (26.9 ms) failed CI in a run that held every other
        // threshold. Here the bounds only catch what a wait on the pool
        // would show (a held statement keeps a connection 3 s): that a probe
        // never waits on the pool is tests/pool_health.rs's, with a control.
        .env("SOAK_HEALTHZ_P99_MS", HEALTHZ_P99_MS.to_string())
        .env("SOAK_LOCAL_P95_MS", "250")
        .env("SOAK_QUERY_P95_MS", "1000")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        // Its own process group, so a timeout below can stop everything it started.
        .process_group(0)
        .spawn()
        .expect("spawn k6/run-soak");

    let limit = Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > limit {
            let pgid = child.id().to_string();
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{pgid}")])
                .status();
            // Up to 25 s for the script to stop what it started, then
            // whatever is left is killed.
            let stopping = Instant::now();
            while child.try_wait().unwrap().is_none()
                && stopping.elapsed() < Duration::from_secs(25)
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut output = String::new();
    std::fs::File::open(&out_path)
        .unwrap()
        .read_to_string(&mut output)
        .unwrap();
    let mut context = format!("--- run-soak output ---\n{output}");
    // One gateway's log, or each replica's.
    for log in std::iter::once(work.join("gateway.log"))
        .chain((1..=9).map(|i| work.join(format!("replica-{i}")).join("gateway.log")))
    {
        let Ok(text) = std::fs::read_to_string(&log) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        context.push_str(&format!(
            "\n--- {} (last 40 lines) ---\n{}",
            log.display(),
            lines[lines.len().saturating_sub(40)..].join("\n")
        ));
    }
    let status =
        status.unwrap_or_else(|| panic!("k6/run-soak ran longer than {limit:?}\n{context}"));
    // Shown with --nocapture (and on failure).
    println!("{output}");
    let summary = std::fs::read_to_string(&summary_path)
        .ok()
        .map(|text| serde_json::from_str(&text).unwrap());
    (status, summary, output, context)
}

fn number(summary: &serde_json::Value, path: &str) -> f64 {
    summary
        .pointer(path)
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| panic!("summary has no number at {path}: {summary:#}"))
}

#[test]
#[ignore = "tier load: needs k6, schemathesis and the test venv; scripts/test installs it"]
fn short_soak_crosses_several_expiries_without_a_failed_s3_query() {
    let (summary, output) = run_soak("60s", &["--rows", "200000", "--progress-every", "10"]);
    let num = |path: &str| number(&summary, path);

    assert_eq!(summary["passed"], true, "{summary:#}");
    assert_eq!(summary["thresholds_ok"], true, "{summary:#}");
    assert!(num("/requests") > 300.0, "too few requests: {summary:#}");
    assert_eq!(num("/failed_requests"), 0.0, "{summary:#}");
    assert!(num("/s3_queries") > 30.0, "too few S3 queries: {summary:#}");
    assert_eq!(num("/s3_failed"), 0.0, "failed S3 queries: {summary:#}");
    // 20-second sessions are refreshed about every 13 s (at 7 s left), so a
    // 60-second run sees four or so, plus the admin rotation.
    assert!(
        num("/rotations/observed") >= 2.0,
        "fewer than 2 rotations: {summary:#}"
    );
    assert!(
        num("/rotations/scheduled") >= 2.0,
        "fewer than 2 scheduled refreshes: {summary:#}"
    );
    assert!(
        num("/rotations/metrics_ok_delta") >= num("/rotations/scheduled"),
        "/metrics counted fewer rotations than /admin/secrets: {summary:#}"
    );
    // Queries really ran on refreshed credentials.
    assert!(
        num("/rotations/query_epoch_max") >= num("/rotations/query_epoch_min") + 2.0,
        "queries did not see new credential epochs: {summary:#}"
    );
    assert_eq!(num("/emulation/s3_expired_rejections"), 0.0, "{summary:#}");
    assert!(
        num("/latency_ms/healthz/p99") < HEALTHZ_P99_MS as f64,
        "{summary:#}"
    );
    assert_eq!(summary["gateway"]["alive_after_run"], true, "{summary:#}");

    // A progress line every 10 s while k6 runs, from the gateway's and the
    // emulation's own counts.
    let progress: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with("run-soak: progress "))
        .collect();
    assert!(
        progress.len() >= 4,
        "{} progress lines:\n{output}",
        progress.len()
    );
    assert!(
        progress.iter().all(|l| !l.contains("poll failed")),
        "{output}"
    );
    let last = progress.last().unwrap();
    for part in [
        " requests (+",
        "/s), 0 failed (5xx), p99 ",
        " ms, credential epoch ",
        " 0 expired-token reads",
    ] {
        assert!(last.contains(part), "{part:?} not in {last:?}");
    }
    let requests: f64 = last
        .split(": ")
        .nth(2)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no request count in {last:?}"));
    assert!(requests > 300.0, "{last}");
}

/// `k6/run-soak --lake`: DuckLake reads through the gateway, data on the
/// emulation's S3, across two or so 20-second sessions, none failing. (The
/// default soak above has no lake: `lake_queries` stays 0 there.)
#[test]
#[ignore = "tier load: needs k6, schemathesis and the test venv; scripts/test installs it"]
fn short_soak_with_a_ducklake_reads_the_lake_across_expiries() {
    let (summary, _) = run_soak("40s", &["--rows", "10000", "--lake-rows", "20000"]);
    let num = |path: &str| number(&summary, path);
    assert_eq!(summary["passed"], true, "{summary:#}");
    assert!(
        num("/lake_queries") > 40.0,
        "too few lake queries: {summary:#}"
    );
    assert_eq!(num("/lake_failed"), 0.0, "failed lake queries: {summary:#}");
    assert!(
        num("/rotations/scheduled") >= 1.0,
        "no scheduled refresh during the run: {summary:#}"
    );
    assert_eq!(num("/emulation/s3_expired_rejections"), 0.0, "{summary:#}");
}

/// `k6/run-soak --replicas 3`: three gateways with one PostgreSQL state and
/// an S3 spool behind HAProxy (round robin), k6 talking to HAProxy only,
/// across two or so 20-second sessions. No request fails; the balancer's log
/// shows statements polled and paged on other replicas than the one that
/// took them, none failing there; every replica refreshed its own
/// credentials; no read met an expired token.
#[test]
#[ignore = "tier load: needs k6, schemathesis and the test venv; scripts/test installs it"]
fn short_soak_over_three_replicas_behind_a_balancer() {
    let (summary, output) = run_soak(
        "45s",
        &[
            "--replicas",
            "3",
            "--rows",
            "200000",
            "--progress-every",
            "10",
        ],
    );
    let num = |path: &str| number(&summary, path);
    assert_eq!(summary["passed"], true, "{summary:#}");
    assert_eq!(num("/failed_requests"), 0.0, "{summary:#}");
    assert!(num("/requests") > 200.0, "too few requests: {summary:#}");
    assert!(num("/s3_queries") > 20.0, "too few S3 queries: {summary:#}");
    assert_eq!(num("/s3_failed"), 0.0, "{summary:#}");
    // One statement every 5 s, each polled, paged and deleted through the
    // balancer.
    assert!(num("/statements") >= 5.0, "too few statements: {summary:#}");
    assert_eq!(num("/statements_failed"), 0.0, "{summary:#}");
    assert!(
        num("/balancer/statement_requests/poll/other_replica") > 0.0,
        "no poll reached another replica than the submitter: {summary:#}"
    );
    assert!(
        num("/balancer/statement_requests/page/other_replica") > 0.0,
        "no page was read on another replica than the submitter: {summary:#}"
    );
    assert_eq!(num("/balancer/other_replica_failed"), 0.0, "{summary:#}");
    assert_eq!(num("/emulation/s3_expired_rejections"), 0.0, "{summary:#}");

    let replicas = summary["replicas"].as_array().expect("replicas");
    assert_eq!(replicas.len(), 3, "{summary:#}");
    let through = num("/balancer/requests_logged");
    for (i, r) in replicas.iter().enumerate() {
        let name = format!("r{}", i + 1);
        assert_eq!(r["name"], name.as_str(), "{summary:#}");
        assert_eq!(r["alive_after_run"], true, "{summary:#}");
        // Every replica refreshed its own credentials on schedule.
        assert!(
            r["rotations_scheduled"].as_f64().unwrap_or(0.0) >= 1.0,
            "replica {name} did not rotate: {summary:#}"
        );
        // Round robin: each replica took about a third (at least a sixth).
        let took = number(&summary, &format!("/balancer/requests_by_replica/{name}"));
        assert!(
            took > through / 6.0,
            "{name} took {took} of {through}: {summary:#}"
        );
    }

    // Progress lines sum the replicas and give each one's epoch.
    let last = output
        .lines()
        .rfind(|l| l.starts_with("run-soak: progress "))
        .unwrap_or_else(|| panic!("no progress line:\n{output}"));
    for part in [
        "0 failed (5xx)",
        "credential epochs r1 ",
        ", r3 ",
        " 0 expired-token reads",
    ] {
        assert!(last.contains(part), "{part:?} not in {last:?}");
    }
}

/// The control of the check above: the same soak over three replicas that
/// share no state (no DUCKGATE_STATE_DSN, local spools) fails, because a
/// statement polled or paged through another replica answers 404 there, and
/// the balancer's log says where.
#[test]
#[ignore = "tier load: needs k6, schemathesis and the test venv; scripts/test installs it"]
fn soak_over_replicas_without_shared_state_fails_across_replicas() {
    let (status, summary, _, context) = run_soak_as(
        "20s",
        &["--replicas", "3", "--rows", "10000"],
        &[("SOAK_UNSHARED_REPLICAS", "1")],
    );
    assert_eq!(status.code(), Some(1), "{context}");
    let summary = summary.unwrap_or_else(|| panic!("no summary\n{context}"));
    assert_eq!(summary["passed"], false, "{summary:#}");
    assert!(number(&summary, "/statements_failed") > 0.0, "{summary:#}");
    assert!(
        number(&summary, "/balancer/other_replica_failed") > 0.0,
        "{summary:#}"
    );
    let failures = summary["balancer"]["statement_requests"].to_string();
    assert!(failures.contains("-> 404 on r"), "{summary:#}");
    assert!(
        summary["problems"]
            .to_string()
            .contains("failed on a replica other than the submitter's"),
        "{summary:#}"
    );
}
