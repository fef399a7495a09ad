//! Test harness: starts the real `duckgate` binary (and, where needed, the
//! S3/STS emulation) on loopback port 0 and talks HTTP to it, or runs the
//! gateway in the test's own process ([`GatewayBuilder::spawn_app`]) where
//! only its HTTP behaviour is under test.
#![allow(dead_code)]

pub mod pg_tls;
pub mod reference;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a gateway answers, and the requests every test makes of it: shared
/// by a process ([`Gateway`]) and an in-process gateway ([`App`]), which
/// both dereference to it.
pub struct Endpoint {
    pub base: String,
    pub client: reqwest::Client,
}

impl Endpoint {
    fn new(base: String) -> Self {
        Self {
            base,
            // Idle connections are dropped long before the gateway closes
            // them (DUCKGATE_HEADER_READ_TIMEOUT_MS, 10 s by default; some
            // tests set 1 s): a request sent on a connection as the gateway
            // closes it fails before it is read (seen when a test paused for
            // a Python writer between two requests).
            client: reqwest::Client::builder()
                .pool_idle_timeout(std::time::Duration::from_millis(500))
                .build()
                .unwrap(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POST /query with a JSON body.
    pub async fn query(&self, body: serde_json::Value) -> reqwest::Response {
        self.client
            .post(self.url("/query"))
            .json(&body)
            .send()
            .await
            .expect("request")
    }

    /// POST /query, expecting 200, returning the JSON answer.
    pub async fn query_ok(&self, sql: &str) -> serde_json::Value {
        let r = self.query(serde_json::json!({ "sql": sql })).await;
        let status = r.status();
        let text = r.text().await.unwrap();
        assert_eq!(status, 200, "query {sql:?} failed: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// GET `path` without a token: the body as text.
    pub async fn get_text(&self, path: &str) -> String {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        r.text().await.unwrap()
    }

    /// GET `path` without a token: the body as JSON.
    pub async fn get_json(&self, path: &str) -> serde_json::Value {
        serde_json::from_str(&self.get_text(path).await).unwrap()
    }

    /// GET /healthz (no token needed).
    pub async fn health(&self) -> serde_json::Value {
        self.get_json("/healthz").await
    }

    /// Polls `/healthz` until `pred` holds (see [`eventually`]) and returns
    /// that document.
    pub async fn health_until(
        &self,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
        within: Duration,
    ) -> serde_json::Value {
        eventually(what, within, || async {
            let h = self.health().await;
            if pred(&h) {
                Ok(h)
            } else {
                Err(h)
            }
        })
        .await
    }

    /// A `method` request to `path` with `token`: status and JSON body
    /// (`Null` when the body is not JSON).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
    ) -> (u16, serde_json::Value) {
        let r = self
            .client
            .request(method, self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// POST /query `sql` (a JSON body) with `token`: status and JSON body.
    pub async fn run_sql(&self, token: &str, sql: &str) -> (u16, serde_json::Value) {
        let r = self
            .client
            .post(self.url("/query"))
            .bearer_auth(token)
            .json(&serde_json::json!({ "sql": sql }))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// GET `path` with `token`: status and JSON body.
    pub async fn get(&self, path: &str, token: &str) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::GET, path, token).await
    }

    /// DELETE `path` with `token`: status and JSON body.
    pub async fn delete(&self, path: &str, token: &str) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::DELETE, path, token).await
    }

    /// Polls `GET /statements/{id}` (with `token`, if the gateway has
    /// tokens) until its state is one of `states`: that document. What a
    /// test waits for instead of sleeping while a statement starts.
    pub async fn statement_in(
        &self,
        id: &str,
        token: Option<&str>,
        states: &[&str],
        within: Duration,
    ) -> serde_json::Value {
        let what = format!("statement {id} {states:?}");
        eventually(&what, within, || async {
            let mut r = self.client.get(self.url(&format!("/statements/{id}")));
            if let Some(token) = token {
                r = r.bearer_auth(token);
            }
            let v: serde_json::Value = match r.send().await {
                Ok(r) => r.json().await.unwrap_or(serde_json::Value::Null),
                Err(e) => return Err(e.to_string()),
            };
            if states.iter().any(|s| v["state"] == *s) {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        })
        .await
    }
}

/// A running gateway process.
pub struct Gateway {
    pub child: Child,
    endpoint: Endpoint,
    /// Every line the process wrote to stderr (its log).
    pub log: Arc<Mutex<Vec<String>>>,
    pub data_dir: tempfile::TempDir,
}

impl std::ops::Deref for Gateway {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

pub struct GatewayBuilder {
    env: Vec<(String, String)>,
    args: Vec<String>,
    data_dir: Option<tempfile::TempDir>,
}

impl GatewayBuilder {
    pub fn env(mut self, k: &str, v: impl ToString) -> Self {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    pub fn data_dir(mut self, d: tempfile::TempDir) -> Self {
        self.data_dir = Some(d);
        self
    }

    /// Starts the binary and waits until it listens.
    pub fn start(self) -> Gateway {
        match self.try_start() {
            Ok(g) => g,
            Err((code, log)) => {
                panic!("gateway did not start (exit {code:?}):\n{}", log.join("\n"))
            }
        }
    }

    /// Starts the binary; `Err` with the exit code and log if it exits first.
    pub fn try_start(self) -> Result<Gateway, (Option<i32>, Vec<String>)> {
        let data_dir = self
            .data_dir
            .unwrap_or_else(|| tempfile::tempdir().expect("tempdir"));
        // DUCKGATE_TEST_BIN runs the suite against another build (e.g. an
        // older commit, to show that a test guards a fix).
        let bin = std::env::var("DUCKGATE_TEST_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_duckgate").to_string());
        let mut cmd = Command::new(bin);
        cmd.args(&self.args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", data_dir.path())
            .env("RUST_LOG", "info")
            .env("DUCKGATE_LISTEN", "127.0.0.1:0")
            .env("DUCKGATE_DATA_DIR", data_dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Ok(dir) = std::env::var("DUCKGATE_EXTENSION_DIR") {
            cmd.env("DUCKGATE_EXTENSION_DIR", dir);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn duckgate");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(i) = line.find("listening on http://") {
                        // Text or JSON lines: the address ends at a space or a quote.
                        let addr: String = line[i + "listening on http://".len()..]
                            .chars()
                            .take_while(|c| !c.is_whitespace() && !matches!(c, '"' | ',' | '}'))
                            .collect();
                        let _ = tx.send(addr);
                    }
                    if std::env::var_os("DUCKGATE_TEST_ECHO").is_some() {
                        eprintln!("[gateway] {line}");
                    }
                    log.lock().unwrap().push(line);
                }
            })
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(addr) = rx.recv_timeout(Duration::from_millis(50)) {
                return Ok(Gateway {
                    child,
                    endpoint: Endpoint::new(format!("http://{addr}")),
                    log,
                    data_dir,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Its last lines: the reader ends at the pipe's end (what
                // it read by then, if a child of it holds the pipe).
                let read_by = Instant::now() + BUSY_MARGIN;
                while !reader.is_finished() && Instant::now() < read_by {
                    std::thread::sleep(POLL);
                }
                let lines = log.lock().unwrap().clone();
                return Err((status.code(), lines));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err((None, log.lock().unwrap().clone()));
            }
        }
    }
}

/// A gateway running in this process: the real `duckgate::run` on a
/// loopback listener of port 0, on a runtime of its own whose threads log to
/// its own subscriber (`log_text`) and record to its own metrics (`/metrics`).
/// It shares the process's environment (`HOME`, `AWS_*`: S3 tests give it
/// base credentials in a file, [`S3Server::app`]); tests of signals,
/// start-up refusals (exit codes), the process environment, and panics the
/// panic hook prints to stderr use a [`Gateway`] process instead.
/// `DUCKGATE_TEST_BIN` does not apply to it.
pub struct App {
    endpoint: Endpoint,
    pub data_dir: tempfile::TempDir,
    /// Every line this gateway logged (its own runtime's subscriber).
    pub log: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl App {
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The Flight SQL listener's URI (`grpc://host:port`), once the gateway
    /// has logged it (started with `DUCKGATE_FLIGHT_LISTEN`).
    pub async fn flight_uri(&self) -> String {
        eventually("the Flight SQL address", Duration::from_secs(10), || {
            let log = self.log_text();
            async move {
                log.lines()
                    .find_map(|l| {
                        let rest = l.split("Flight SQL listening on ").nth(1)?;
                        Some(rest.split_whitespace().next()?.to_string())
                    })
                    .ok_or("not logged yet")
            }
        })
        .await
    }
}

/// Collects what an in-process gateway logs, line by line.
#[derive(Clone)]
struct LogSink(Arc<Mutex<Vec<String>>>);

/// One event's text, added to the log when the subscriber is done with it.
struct LogEvent(Arc<Mutex<Vec<String>>>, Vec<u8>);

impl Write for LogEvent {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.1.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogEvent {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.1);
        let mut log = self.0.lock().unwrap();
        for line in text.lines() {
            if std::env::var_os("DUCKGATE_TEST_ECHO").is_some() {
                eprintln!("[app] {line}");
            }
            log.push(line.to_string());
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogSink {
    type Writer = LogEvent;
    fn make_writer(&'a self) -> LogEvent {
        LogEvent(self.0.clone(), Vec::new())
    }
}

impl std::ops::Deref for App {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl Drop for App {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl GatewayBuilder {
    /// Runs the gateway in this process. Settings given with `env` become
    /// flags (`DUCKGATE_POOL_SIZE` is `--pool-size`); `DUCKGATE_EXTENSION_DIR`
    /// comes from the environment, as for processes.
    pub async fn spawn_app(self) -> App {
        use clap::Parser as _;
        let data_dir = self
            .data_dir
            .unwrap_or_else(|| tempfile::tempdir().expect("tempdir"));
        let mut args = vec![
            "duckgate".to_string(),
            format!("--data-dir={}", data_dir.path().join("data").display()),
        ];
        for (k, v) in &self.env {
            let flag = k
                .strip_prefix("DUCKGATE_")
                .unwrap_or_else(|| {
                    panic!("{k}: an in-process gateway takes DUCKGATE_ settings only")
                })
                .to_ascii_lowercase()
                .replace('_', "-");
            args.push(format!("--{flag}={v}"));
        }
        args.extend(self.args);
        let config = duckgate::config::Cli::try_parse_from(&args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .serve_config();
        // Its own runtime, on threads that log to its own subscriber, so
        // the test can read what this gateway (and no other) logged.
        // `run_blocking` puts it in non-blocking mode for tokio.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        // `info` for every target, the AWS SDK's too, as the processes
        // under test log (RUST_LOG=info): what tests assert never reaches
        // the log is checked at the level operators run.
        let dispatch = tracing::Dispatch::new(duckgate::telemetry::subscriber(
            duckgate::config::LogFormat::Text,
            tracing_subscriber::EnvFilter::new("info"),
            LogSink(log.clone()),
            false,
        ));
        // Its own metrics too: a recorder that lives as long as the
        // process (a few per test binary), local to the same threads.
        let recorder: &'static metrics_exporter_prometheus::PrometheusRecorder =
            Box::leak(Box::new(duckgate::api::metrics::new_recorder()));
        let handle = recorder.handle();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ended_tx, mut ended) = tokio::sync::oneshot::channel::<String>();
        std::thread::spawn(move || {
            let _log = tracing::dispatcher::set_default(&dispatch);
            let _metrics = metrics::set_default_local_recorder(recorder);
            let runtime = duckgate::runtime_builder()
                .worker_threads(2)
                .on_thread_start(move || {
                    // For the thread's whole life.
                    std::mem::forget(tracing::dispatcher::set_default(&dispatch));
                    std::mem::forget(metrics::set_default_local_recorder(recorder));
                })
                .build()
                .expect("the gateway's runtime");
            // Not `run_with_metrics` awaited here: that would compile the
            // gateway's futures again in every test binary.
            let result = duckgate::run_blocking(&runtime, config, listener, stopped, handle);
            let _ = ended_tx.send(match result {
                Ok(()) => "the gateway stopped".to_string(),
                Err(e) => format!("the gateway failed: {e:#}"),
            });
            runtime.shutdown_timeout(Duration::from_secs(10));
        });
        let endpoint = Endpoint::new(base);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(why) = ended.try_recv() {
                panic!("{why} at start:\n{}", log.lock().unwrap().join("\n"));
            }
            let ready = endpoint.client.get(endpoint.url("/readyz")).send().await;
            if ready.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the gateway was not ready within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        App {
            endpoint,
            data_dir,
            log,
            stop: Some(stop),
        }
    }
}

impl Gateway {
    pub fn builder() -> GatewayBuilder {
        GatewayBuilder {
            env: Vec::new(),
            args: Vec::new(),
            data_dir: None,
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The Flight SQL listener's URI (`grpc://host:port`), once the process
    /// has logged it (started with `DUCKGATE_FLIGHT_LISTEN`).
    pub async fn flight_uri(&self) -> String {
        eventually("the Flight SQL address", Duration::from_secs(10), || {
            let log = self.log_text();
            async move {
                log.lines()
                    .find_map(|l| {
                        let rest = l.split("Flight SQL listening on ").nth(1)?;
                        Some(
                            rest.split_whitespace()
                                .next()?
                                .trim_matches('"')
                                .to_string(),
                        )
                    })
                    .ok_or("not logged yet")
            }
        })
        .await
    }

    /// Sends SIGTERM and waits for the exit code.
    pub fn terminate(&mut self, within: Duration) -> Option<i32> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The loopback S3 + STS emulation (tests/support/s3_sts_server.py).
pub struct S3Server {
    child: Child,
    _stdin: ChildStdin,
    pub config: serde_json::Value,
    pub port: u16,
    pub control: String,
    pub stderr_path: PathBuf,
    /// The emulation's base credentials (its IAM user's keys) in the AWS
    /// shared-credentials format, mode 0600: what
    /// `DUCKGATE_S3_BASE_CREDENTIALS_FILE` points at in [`S3Server::app`].
    pub base_credentials_file: PathBuf,
    _dir: tempfile::TempDir,
}

/// The Python that scripts/test-env installed. Panics with a clear message
/// when missing: these tests must run, not skip.
pub fn test_python() -> String {
    std::env::var("DUCKGATE_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("DUCKGATE_TEST_PYTHON is not set: run the suite with scripts/test (it installs the S3/STS emulation)")
    })
}

pub fn extension_dir() -> String {
    let dir = std::env::var("DUCKGATE_EXTENSION_DIR").unwrap_or_else(|_| {
        panic!("DUCKGATE_EXTENSION_DIR is not set: run the suite with scripts/test")
    });
    assert!(
        Path::new(&dir)
            .join("v1.5.5/linux_amd64/httpfs.duckdb_extension")
            .is_file(),
        "httpfs extension missing under {dir}"
    );
    dir
}

impl S3Server {
    pub fn start(extra_args: &[&str]) -> S3Server {
        let dir = tempfile::tempdir().unwrap();
        let stderr_path = dir.path().join("s3.log");
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/s3_sts_server.py"
        );
        let mut child = Command::new(test_python())
            .arg(script)
            .args(["--port", "0", "--exit-with-stdin"])
            .args(extra_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("spawn the S3/STS emulation");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut config = serde_json::Value::Null;
        let mut port = 0u16;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut line = String::new();
        while Instant::now() < deadline {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                panic!("S3 emulation exited before READY:\n{log}");
            }
            if let Some(json) = line.strip_prefix("CONFIG ") {
                config = serde_json::from_str(json.trim()).unwrap();
            } else if let Some(p) = line.strip_prefix("READY ") {
                port = p.trim().parse().unwrap();
                break;
            }
        }
        assert!(port != 0, "S3 emulation never became ready");
        let control = config["control_url"].as_str().unwrap().to_string();
        let base_credentials_file = dir.path().join("base-credentials");
        write_credentials_file(
            &base_credentials_file,
            config["access_key_id"].as_str().unwrap(),
            config["secret_access_key"].as_str().unwrap(),
        );
        S3Server {
            child,
            _stdin: stdin,
            config,
            port,
            control,
            stderr_path,
            base_credentials_file,
            _dir: dir,
        }
    }

    pub fn str(&self, key: &str) -> String {
        self.config[key].as_str().unwrap().to_string()
    }

    /// A gateway builder configured to assume the emulation's role, signing
    /// STS calls with the base credentials in [`S3Server::base_credentials_file`].
    /// Only `DUCKGATE_` settings: for an in-process gateway
    /// ([`GatewayBuilder::spawn_app`]) or a process.
    pub fn app(&self, session_secs: u64) -> GatewayBuilder {
        self.settings(session_secs).env(
            "DUCKGATE_S3_BASE_CREDENTIALS_FILE",
            self.base_credentials_file.display(),
        )
    }

    /// Like [`S3Server::app`], but the base credentials come from the
    /// process environment (`AWS_ACCESS_KEY_ID`, ...) through the AWS SDK's
    /// standard chain, as most deployments run: a process only, for tests
    /// whose subject includes that environment (httpfs copies those variables
    /// into DuckDB's settings).
    pub fn gateway(&self, session_secs: u64) -> GatewayBuilder {
        self.settings(session_secs)
            .env("AWS_ACCESS_KEY_ID", self.str("access_key_id"))
            .env("AWS_SECRET_ACCESS_KEY", self.str("secret_access_key"))
            .env("AWS_REGION", self.str("region"))
    }

    /// The emulation's endpoints, role and bucket scope, and no base
    /// credentials: enough for the web-identity source, whose STS call is
    /// not signed.
    pub fn settings(&self, session_secs: u64) -> GatewayBuilder {
        Gateway::builder()
            .env("DUCKGATE_EXTENSION_DIR", extension_dir())
            .env("DUCKGATE_S3_ROLE_ARN", self.str("role_arn"))
            .env("DUCKGATE_S3_SESSION_DURATION_SECS", session_secs)
            .env("DUCKGATE_S3_REGION", self.str("region"))
            .env("DUCKGATE_S3_ENDPOINT", self.str("endpoint"))
            .env("DUCKGATE_S3_URL_STYLE", "path")
            .env("DUCKGATE_S3_USE_SSL", "false")
            .env("DUCKGATE_S3_SCOPE", "s3://duckgate-test/")
            .env("DUCKGATE_STS_ENDPOINT", self.str("sts_endpoint"))
    }

    pub async fn control(&self, method: &str, path: &str) -> serde_json::Value {
        let client = reqwest::Client::new();
        let url = format!("{}/{}", self.control, path);
        let req = if method == "POST" {
            client.post(url)
        } else {
            client.get(url)
        };
        req.send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or(serde_json::Value::Null)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl GatewayBuilder {
    /// Sets `k` to `v`, replacing an earlier value (of [`S3Server::app`], say):
    /// an in-process gateway takes each setting once, as a flag.
    pub fn set(mut self, k: &str, v: impl ToString) -> Self {
        self.env.retain(|(key, _)| key != k);
        self.env(k, v)
    }
}

/// Writes `key_id` and `secret` as the `[default]` profile of an AWS
/// shared-credentials file at `path`, readable by its owner only.
pub fn write_credentials_file(path: &Path, key_id: &str, secret: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("create the credentials file");
    write!(
        f,
        "[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n"
    )
    .unwrap();
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a machine busy with other work (two cores, several test
/// processes) may add to any wait for an event: the margin every deadline
/// derived from a configured interval or timeout carries. A wait that a
/// loaded machine outlasts fails a run (issue 56); a longer one costs
/// nothing when the event comes on time, since waits poll.
pub const BUSY_MARGIN: Duration = Duration::from_secs(10);

/// How long to wait for an event that a configured `interval` drives (a
/// refresh, a heartbeat, a sweep, a timeout firing): ten such intervals
/// and [`BUSY_MARGIN`].
pub fn intervals(interval: Duration) -> Duration {
    interval * 10 + BUSY_MARGIN
}

/// How often [`eventually`] and its blocking twin look again.
pub const POLL: Duration = Duration::from_millis(20);

/// Polls `probe` every [`POLL`] until it gives `Ok`, and returns that; fails
/// the test after `within`, naming `what` it waited for and what the last
/// probe saw (its `Err`).
pub async fn eventually<T, E: std::fmt::Display, Fut>(
    what: &str,
    within: Duration,
    mut probe: impl FnMut() -> Fut,
) -> T
where
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + within;
    loop {
        match probe().await {
            Ok(t) => return t,
            Err(seen) => assert!(
                Instant::now() < deadline,
                "no {what} within {within:?}; last seen: {seen}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`eventually`] for a thread that is not on a runtime (a blocking task,
/// a helper thread).
pub fn eventually_blocking<T, E: std::fmt::Display>(
    what: &str,
    within: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match probe() {
            Ok(t) => return t,
            Err(seen) => assert!(
                Instant::now() < deadline,
                "no {what} within {within:?}; last seen: {seen}"
            ),
        }
        std::thread::sleep(POLL);
    }
}

/// A query that takes `d` and then completes (DuckDB's `sleep_ms`).
pub fn sleeping_sql(d: Duration) -> String {
    format!("SELECT sleep_ms({}) IS NULL AS slept", d.as_millis())
}

/// The value of series `name` (labels included, as written) in a /metrics
/// scrape.
pub fn metric(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from:\n{scrape}"))
}

/// p-th percentile of durations, in milliseconds.
pub fn percentile_ms(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let idx = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[idx].as_secs_f64() * 1000.0
}

/// Writes `text` to a file in `dir` and returns its path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    p
}

/// Every response body (and header set) a test saw, for the leak check.
#[derive(Default)]
pub struct Seen(pub Vec<String>);

impl Seen {
    /// Records the answer and returns its status and JSON body.
    pub async fn take(&mut self, r: reqwest::Response) -> (u16, serde_json::Value) {
        let status = r.status().as_u16();
        let headers = format!("{:?}", r.headers());
        let text = r.text().await.unwrap_or_default();
        self.0.push(headers);
        self.0.push(text.clone());
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }
}

/// A gateway whose log a test reads: a process or an in-process one.
pub trait Logged {
    /// Every line it logged so far.
    fn log_text(&self) -> String;
}

impl Logged for Gateway {
    fn log_text(&self) -> String {
        Gateway::log_text(self)
    }
}

impl Logged for App {
    fn log_text(&self) -> String {
        App::log_text(self)
    }
}

/// No secret key or session token the emulation issued, nor the base secret
/// or `admin_token`, appears in anything the test saw or in the gateway's log.
pub async fn assert_no_leaks(g: &impl Logged, s3: &S3Server, seen: &Seen, admin_token: &str) {
    let issued = s3.control("GET", "secrets").await;
    let mut values: Vec<String> = issued["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    values.push(s3.str("secret_access_key"));
    values.push(admin_token.to_string());
    // Key ids too: every one STS issued and the base one (answers show at
    // most their last four characters).
    values.extend(
        issued["key_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string)),
    );
    values.push(s3.str("access_key_id"));
    assert!(values.len() >= 3);
    let log = g.log_text();
    for v in &values {
        // Compare a long prefix too: partial echoes leak as much.
        let probe = &v[..v.len().min(16)];
        assert!(!log.contains(probe), "a credential reached the gateway log");
        for body in &seen.0 {
            assert!(
                !body.contains(probe),
                "a credential reached a response: {body}"
            );
        }
    }
}

/// Reads an answer's body chunk by chunk: what arrived, and whether the
/// transfer failed (an aborted body) before it ended.
pub async fn body_and_failure(mut r: reqwest::Response) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    loop {
        match r.chunk().await {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => return (got, false),
            Err(_) => return (got, true),
        }
    }
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL 15 cluster (the Debian package scripts/test-env installs)
/// in a temporary directory on a free loopback port, with user `duckgate`
/// and one database.
pub struct Postgres {
    dir: tempfile::TempDir,
    pub port: u16,
    as_postgres: bool,
    /// The password of user `duckgate`.
    password: String,
    /// The database [`Postgres::start`] created.
    database: String,
}

impl Postgres {
    /// Starts a cluster whose user `duckgate` has `password`, with an empty
    /// database `database`.
    pub fn start(password: &str, database: &str) -> Postgres {
        Self::start_with(password, database, |_| {})
    }

    /// [`Postgres::start`], with `configure` given the data directory after
    /// initdb and before the server starts (what it writes there is handed
    /// to the cluster's owner).
    fn start_with(password: &str, database: &str, configure: impl FnOnce(&Path)) -> Postgres {
        assert!(
            Path::new(PG_BIN).join("initdb").is_file(),
            "{PG_BIN}/initdb is missing: scripts/test-env installs the postgresql-15 package"
        );
        let dir = tempfile::Builder::new()
            .prefix("duckgate-pg")
            .tempdir_in("/tmp")
            .unwrap();
        // initdb refuses to run as root: the cluster belongs to `postgres`.
        let uid = Command::new("id").arg("-u").output().unwrap().stdout;
        let as_postgres = String::from_utf8_lossy(&uid).trim() == "0";
        let pw = dir.path().join("pw");
        std::fs::write(&pw, password).unwrap();
        if as_postgres {
            run_pg(
                Command::new("chown")
                    .arg("-R")
                    .arg("postgres:")
                    .arg(dir.path()),
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Postgres {
            dir,
            port,
            as_postgres,
            password: password.to_string(),
            database: database.to_string(),
        };
        let data = pg.dir.path().join("data");
        run_pg(
            pg.command("initdb")
                .arg("-D")
                .arg(&data)
                .args(["-A", "scram-sha-256", "-U", "duckgate", "--no-sync"])
                .arg(format!("--pwfile={}", pw.display())),
        );
        configure(&data);
        if pg.as_postgres {
            run_pg(Command::new("chown").arg("-R").arg("postgres:").arg(&data));
        }
        run_pg(
            pg.command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-o")
                .arg(format!(
                    "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
                    pg.dir.path().display()
                ))
                .arg("-l")
                .arg(pg.dir.path().join("log"))
                .args(["-w", "start"]),
        );
        run_pg(
            Command::new(Path::new(PG_BIN).join("psql"))
                .env("PGPASSWORD", password)
                .args(["-h", "127.0.0.1", "-p", &port.to_string()])
                .args(["-U", "duckgate", "-d", "postgres", "-q"])
                .arg("-c")
                .arg(format!("CREATE DATABASE {database}")),
        );
        pg
    }

    /// The connection string (libpq keywords) of the cluster's database as
    /// user `duckgate`: what DUCKGATE_STATE_DSN takes. One place, so every
    /// test reaches PostgreSQL the same way.
    pub fn dsn(&self) -> String {
        self.dsn_via(self.port)
    }

    /// [`Postgres::dsn`] through another loopback port (a proxy in front of
    /// the cluster that a test cuts and restores).
    pub fn dsn_via(&self, port: u16) -> String {
        format!(
            "host=127.0.0.1 port={port} user=duckgate password={} dbname={}",
            self.password, self.database
        )
    }

    /// Stops the server at once (`-m immediate`: every session cut, as a
    /// crash or a failover would).
    pub fn stop(&self) {
        run_pg(
            self.command("pg_ctl")
                .arg("-D")
                .arg(self.dir.path().join("data"))
                .args(["-m", "immediate", "-w", "stop"]),
        );
    }

    /// Starts the stopped server again on the same port.
    pub fn restart(&self) {
        run_pg(
            self.command("pg_ctl")
                .arg("-D")
                .arg(self.dir.path().join("data"))
                .arg("-o")
                .arg(format!(
                    "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
                    self.port,
                    self.dir.path().display()
                ))
                .arg("-l")
                .arg(self.dir.path().join("log"))
                .args(["-w", "start"]),
        );
    }

    /// psql for `database` as `duckgate` with `password`, to read SQL
    /// from its standard input (a session a test holds open).
    pub fn psql_session(&self, password: &str, database: &str) -> Command {
        let mut c = Command::new(Path::new(PG_BIN).join("psql"));
        c.env("PGPASSWORD", password)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args([
                "-U",
                "duckgate",
                "-d",
                database,
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
            ]);
        c
    }

    fn command(&self, tool: &str) -> Command {
        let bin = Path::new(PG_BIN).join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin);
            c
        } else {
            Command::new(bin)
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

fn run_pg(cmd: &mut Command) {
    let out = cmd.output().expect("run a PostgreSQL tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `script` with the test venv's Python (argv: `args`, the extension
/// directory in `DUCKGATE_EXTENSION_DIR`); its stdout. Fails the test when
/// the script fails.
pub fn python(script: &str, args: &[&str]) -> String {
    python_in(&test_python(), script, args)
}

/// [`python`] with another interpreter (a venv of its own, e.g. for a
/// client whose dependencies conflict with the test venv's).
pub fn python_in(interpreter: &str, script: &str, args: &[&str]) -> String {
    let out = Command::new(interpreter)
        .arg("-c")
        .arg(script)
        .args(args)
        .env("DUCKGATE_EXTENSION_DIR", extension_dir())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "python failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A tmpfs of a fixed size mounted on a directory, unmounted when dropped.
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `1m`) on `dir`; `None` where the
    /// test may not mount.
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "SKIPPED: cannot mount a tmpfs ({}); the full-disk case is not run",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Tmpfs {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: the gateway's runtime may still hold a file as it stops.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

/// The names of the entries of `dir`.
pub fn files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}
