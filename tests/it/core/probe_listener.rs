//! `DUCKGATE_PROBE_LISTEN` (issue 25): the probes on an address of their
//! own, served by a thread with its own event loop. The property that
//! matters: whatever holds the main listener, the probes still answer. Here
//! the main listener's connection cap (`DUCKGATE_MAX_CONNECTIONS=2`) is
//! taken by two idle connections; as the control, a probe on the main
//! address then gets no answer (its connection waits in the kernel's
//! backlog), while the probe address answers `/healthz` and `/readyz` with
//! the same document and serves nothing else.

use std::time::Duration;

use crate::common::{eventually, eventually_blocking, Gateway, BUSY_MARGIN};

/// How long the held connections keep the main listener's cap: a probe
/// that had to wait for them would wait this long.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(60);

fn probe_address(g: &Gateway) -> String {
    eventually_blocking("the probe listener logged", BUSY_MARGIN, || {
        let log = g.log_text();
        match log.find("probe listener on http://") {
            Some(i) => Ok(log[i + "probe listener on ".len()..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string()),
            None => Err(log),
        }
    })
}

#[tokio::test]
async fn probes_answer_on_their_own_address_while_the_main_listener_is_full() {
    let g = Gateway::builder()
        .env("DUCKGATE_PROBE_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_MAX_CONNECTIONS", 2)
        .env(
            "DUCKGATE_HEADER_READ_TIMEOUT_MS",
            HEADER_READ_TIMEOUT.as_millis(),
        )
        .start();
    let probes = probe_address(&g);
    // A quarter of the time the cap is held: room for a busy machine, and
    // still far short of what a probe queued behind the cap would take.
    let client = reqwest::Client::builder()
        .timeout(HEADER_READ_TIMEOUT / 4)
        .build()
        .unwrap();

    let (main_health, probe_health) = (g.health().await, {
        let r = client
            .get(format!("{probes}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<serde_json::Value>().await.unwrap()
    });
    assert_eq!(probe_health["status"], main_health["status"]);
    assert_eq!(probe_health["pool"]["size"], main_health["pool"]["size"]);
    let r = client.get(format!("{probes}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    for (method, path) in [("POST", "/query"), ("GET", "/metrics"), ("GET", "/ui")] {
        let r = client
            .request(method.parse().unwrap(), format!("{probes}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method} {path} on the probe address");
    }

    // Two idle connections take the main listener's whole cap.
    let _held: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(g.base.trim_start_matches("http://")).unwrap())
        .collect();

    // Control: once the gateway has taken them, the main address's probe
    // is not served (a client giving up after 2 s: no answer is the
    // outcome, so a busy machine cannot fake it).
    let fresh = |timeout| {
        reqwest::Client::builder()
            .timeout(timeout)
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    eventually(
        "the main listener's cap taken (a probe on it unanswered)",
        BUSY_MARGIN,
        || async {
            match fresh(Duration::from_secs(2))
                .get(g.url("/healthz"))
                .send()
                .await
            {
                Err(_) => Ok(()),
                Ok(r) => Err(format!("answered {}", r.status())),
            }
        },
    )
    .await;
    // The probe address is, without waiting for the cap: within a quarter
    // of the time the held connections keep it.
    for _ in 0..20 {
        let r = fresh(HEADER_READ_TIMEOUT / 4)
            .get(format!("{probes}/healthz"))
            .send()
            .await;
        let r = r.expect("the probe address did not answer");
        assert_eq!(r.status(), 200);
    }
}
