//! `DUCKGATE_PROBE_LISTEN` (issue 25): the probes on an address of their
//! own, served by a thread with its own event loop. The property that
//! matters: whatever holds the main listener, the probes still answer. Here
//! the main listener's connection cap (`DUCKGATE_MAX_CONNECTIONS=2`) is
//! taken by two idle connections; as the control, a probe on the main
//! address then gets no answer (its connection waits in the kernel's
//! backlog), while the probe address answers `/healthz` and `/readyz` with
//! the same document and serves nothing else.

use std::time::{Duration, Instant};

use crate::common::Gateway;

fn probe_address(g: &Gateway) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = g.log_text();
        if let Some(i) = log.find("probe listener on http://") {
            return log[i + "probe listener on ".len()..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no probe listener logged:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn probes_answer_on_their_own_address_while_the_main_listener_is_full() {
    let g = Gateway::builder()
        .env("DUCKGATE_PROBE_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_MAX_CONNECTIONS", 2)
        .env("DUCKGATE_HEADER_READ_TIMEOUT_MS", 60_000)
        .start();
    let probes = probe_address(&g);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
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
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Control: the main address's probe is not served.
    let fresh = || {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let main = fresh().get(g.url("/healthz")).send().await;
    assert!(
        main.is_err(),
        "the main listener answered a probe with its cap taken: the control case does not hold"
    );
    // The probe address is.
    for _ in 0..20 {
        let started = Instant::now();
        let r = fresh().get(format!("{probes}/healthz")).send().await;
        let r = r.expect("the probe address did not answer");
        assert_eq!(r.status(), 200);
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
