//! The benchmark suite of issue 6: every row pairs the gateway (the real
//! `duckgate` binary, over HTTP on loopback) with DuckDB doing the same work
//! in this process (the same `duckdb` crate, so the same DuckDB build, with
//! the same number of connections and threads), and prints one Markdown table.
//!
//! Run it through `bench/run`, which builds, installs the test tooling and
//! passes `--gateway`; by hand:
//!
//! ```sh
//! cargo run --release --example bench -- --gateway target/release/duckgate [--quick]
//! ```
//!
//! Options: `--quick` (small sizes, short runs), `--gateway PATH`, `--work DIR`
//! (data and logs; default a temporary directory), `--clients N` (concurrent
//! clients = pool connections = in-process connections; default 4),
//! `--threads T` (DuckDB threads on both sides; default the number of cores),
//! `--only small,cpu,guard,large,memory,health,s3,rotation,statements,lake,flight`.
//!
//! Load generators: small queries use `wrk` (C, one event-loop thread), not a
//! tokio/reqwest loop in this process. On a two-core machine the client shares
//! the cores with the gateway, and wrk spends the least CPU per request of the
//! options at hand, so the gateway's figure carries as little client cost as
//! possible; its Lua `done()` hook reports p50/p99 from its own histogram.
//! `/healthz` needs a fixed rate, which wrk cannot hold (it is closed-loop), so
//! it uses an open-loop tokio schedule here: one request every millisecond,
//! sent on time whatever the previous ones do. Large results are read with
//! reqwest (a streaming body, bytes counted and dropped).
//!
//! Every loop is bounded by a duration or a count; child processes (gateways,
//! the S3 emulation, wrk) are killed by their handles when they go out of
//! scope.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::RecordBatch;
use futures::StreamExt;
use serde_json::{json, Value};

const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
const LONG_QUERY: &str = "SELECT sum(hash(i)) FROM range(100000000000) t(i)";
const S3_URL: &str = "s3://duckgate-test/data/numbers.parquet";

// ---------------------------------------------------------------- options

#[derive(Debug, Clone)]
struct Opts {
    quick: bool,
    gateway: PathBuf,
    work: PathBuf,
    clients: usize,
    threads: usize,
    /// Large-result sizes, smaller first (the memory goal compares the two).
    sizes: [u64; 2],
    /// The table of the point aggregate.
    small_table_rows: u64,
    small_secs: u64,
    health_secs: u64,
    s3_rows: u64,
    reps: usize,
    rotation_secs: u64,
    rotation_pairs: usize,
    rotations: usize,
    only: Option<Vec<String>>,
    python: Option<String>,
    extension_dir: Option<String>,
}

impl Opts {
    fn parse() -> Result<Opts> {
        let mut quick = false;
        let mut gateway = None;
        let mut work = None;
        let mut clients = 4usize;
        let mut threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        let mut only = None;
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or_else(|| anyhow!("{a} needs a value"));
            match a.as_str() {
                "--quick" => quick = true,
                "--gateway" => gateway = Some(PathBuf::from(value()?)),
                "--work" => work = Some(PathBuf::from(value()?)),
                "--clients" => clients = value()?.parse()?,
                "--threads" => threads = value()?.parse()?,
                "--only" => {
                    only = Some(value()?.split(',').map(|s| s.trim().to_string()).collect())
                }
                "-h" | "--help" => {
                    eprintln!(
                        "usage: bench --gateway PATH [--quick] [--work DIR] [--clients N] \
                         [--threads T] [--only small,cpu,guard,large,memory,health,s3,rotation,statements,lake,flight]"
                    );
                    std::process::exit(0);
                }
                other => bail!("unknown argument {other}"),
            }
        }
        let gateway = gateway
            .or_else(|| std::env::var_os("DUCKGATE_BENCH_GATEWAY").map(PathBuf::from))
            .ok_or_else(|| anyhow!("--gateway PATH (or DUCKGATE_BENCH_GATEWAY) is required"))?;
        if !gateway.is_file() {
            bail!("gateway binary {} not found", gateway.display());
        }
        let work = match work {
            Some(w) => w,
            None => tempfile::Builder::new()
                .prefix("duckgate-bench-")
                .tempdir()?
                .keep(),
        };
        std::fs::create_dir_all(&work)?;
        let q = quick;
        Ok(Opts {
            quick,
            gateway,
            work: work.canonicalize()?,
            clients: clients.max(1),
            threads: threads.max(1),
            sizes: if q {
                [100_000, 1_000_000]
            } else {
                [1_000_000, 10_000_000]
            },
            small_table_rows: 1_000_000,
            small_secs: if q { 3 } else { 10 },
            health_secs: if q { 3 } else { 30 },
            s3_rows: if q { 100_000 } else { 10_000_000 },
            reps: if q { 1 } else { 3 },
            rotation_secs: if q { 3 } else { 10 },
            rotation_pairs: if q { 1 } else { 3 },
            rotations: if q { 5 } else { 20 },
            only,
            python: std::env::var("DUCKGATE_TEST_PYTHON").ok(),
            extension_dir: std::env::var("DUCKGATE_EXTENSION_DIR").ok(),
        })
    }

    fn wants(&self, section: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == section))
    }

    fn db_path(&self) -> PathBuf {
        self.work.join("bench.duckdb")
    }

    fn inproc_db_path(&self) -> PathBuf {
        self.work.join("bench-inproc.duckdb")
    }
}

fn log(msg: impl AsRef<str>) {
    eprintln!("bench: {}", msg.as_ref());
}

fn human_rows(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

// ---------------------------------------------------------------- results

struct Row {
    section: &'static str,
    name: String,
    gateway: String,
    inproc: String,
    ratio: String,
    goal: String,
    met: Option<bool>,
}

#[derive(Default)]
struct Table {
    rows: Vec<Row>,
}

impl Table {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        section: &'static str,
        name: impl Into<String>,
        gateway: impl Into<String>,
        inproc: impl Into<String>,
        ratio: impl Into<String>,
        goal: impl Into<String>,
        met: Option<bool>,
    ) {
        let row = Row {
            section,
            name: name.into(),
            gateway: gateway.into(),
            inproc: inproc.into(),
            ratio: ratio.into(),
            goal: goal.into(),
            met,
        };
        eprintln!(
            "bench: | {} | {} | {} | {} | {} | {} |",
            row.section, row.name, row.gateway, row.inproc, row.ratio, row.goal
        );
        self.rows.push(row);
    }

    fn failed(&mut self, section: &'static str, name: impl Into<String>, err: &anyhow::Error) {
        let msg = format!("{err:#}").replace('|', "/").replace('\n', " ");
        self.add(
            section,
            name,
            format!("FAILED: {msg}"),
            "",
            "",
            "",
            Some(false),
        );
    }

    fn markdown(&self) -> String {
        let mut s = String::new();
        s.push_str("| # | benchmark | gateway (HTTP) | in-process DuckDB | ratio | goal | met |\n");
        s.push_str("|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let met = match r.met {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "",
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.section, r.name, r.gateway, r.inproc, r.ratio, r.goal, met
            ));
        }
        s
    }
}

fn ms(d: f64) -> String {
    if d < 0.1 {
        format!("{:.3} ms", d)
    } else if d < 10.0 {
        format!("{:.2} ms", d)
    } else {
        format!("{:.0} ms", d)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 0.5)
}

// ---------------------------------------------------------------- the gateway

struct Gateway {
    child: Child,
    base: String,
    client: reqwest::Client,
    _data: tempfile::TempDir,
}

impl Gateway {
    fn start(opts: &Opts, name: &str, env: &[(&str, String)]) -> Result<Gateway> {
        let data = tempfile::Builder::new()
            .prefix("gw-")
            .tempdir_in(&opts.work)?;
        let log_path = opts.work.join(format!("gateway-{name}.log"));
        let mut cmd = Command::new(&opts.gateway);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", data.path())
            .env("DUCKGATE_LISTEN", "127.0.0.1:0")
            .env("DUCKGATE_DATA_DIR", data.path().join("data"))
            .env("DUCKGATE_POOL_SIZE", opts.clients.to_string())
            .env("DUCKGATE_THREADS", opts.threads.to_string())
            .env("DUCKGATE_MAX_QUERY_TIMEOUT_MS", "600000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        // Settings to compare (`DUCKGATE_BENCH_GATEWAY_ENV="K=V K2=V2"`),
        // applied to every gateway the suite starts.
        for pair in std::env::var("DUCKGATE_BENCH_GATEWAY_ENV")
            .unwrap_or_default()
            .split_whitespace()
        {
            if let Some((k, v)) = pair.split_once('=') {
                cmd.env(k, v);
            }
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", opts.gateway.display()))?;
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let mut file = std::fs::File::create(&log_path)?;
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("listening on http://") {
                    let addr = line[i + "listening on http://".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .trim_end_matches(['"', ',', '}'])
                        .to_string();
                    let _ = tx.send(addr);
                }
                let _ = writeln!(file, "{line}");
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(addr) = rx.recv_timeout(Duration::from_millis(50)) {
                return Ok(Gateway {
                    child,
                    base: format!("http://{addr}"),
                    client: reqwest::Client::builder().build()?,
                    _data: data,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                std::thread::sleep(Duration::from_millis(200));
                let text = std::fs::read_to_string(&log_path).unwrap_or_default();
                bail!("gateway exited ({status}) before listening:\n{text}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("gateway did not listen within 120 s");
            }
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn health(&self) -> Result<Value> {
        Ok(self
            .client
            .get(self.url("/healthz"))
            .send()
            .await?
            .json()
            .await?)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn query_body(sql: &str, format: &str, max_rows: u64) -> Value {
    json!({"sql": sql, "format": format, "max_rows": max_rows, "timeout_ms": 600000})
}

/// POSTs a query and reads the body to its end. Returns (bytes, seconds to
/// the last byte).
async fn fetch(client: &reqwest::Client, url: &str, body: &Value) -> Result<(u64, f64)> {
    let started = Instant::now();
    let resp = client.post(url).json(body).send().await?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        bail!(
            "HTTP {status}: {}",
            text.chars().take(300).collect::<String>()
        );
    }
    let mut stream = resp.bytes_stream();
    let mut bytes = 0u64;
    while let Some(chunk) = stream.next().await {
        bytes += chunk.context("body ended abnormally")?.len() as u64;
    }
    Ok((bytes, started.elapsed().as_secs_f64()))
}

async fn query_json(g: &Gateway, sql: &str) -> Result<Value> {
    let r = g
        .client
        .post(g.url("/query"))
        .json(&query_body(sql, "json", 1000))
        .send()
        .await?;
    let status = r.status();
    let v: Value = r.json().await?;
    if !status.is_success() {
        bail!("HTTP {status}: {v}");
    }
    Ok(v)
}

// ---------------------------------------------------------------- in-process DuckDB

fn open_inproc(path: Option<&Path>, opts: &Opts) -> Result<duckdb::Connection> {
    let mut config = duckdb::Config::default()
        .threads(opts.threads as i64)?
        .enable_autoload_extension(false)?
        .with("autoinstall_known_extensions", "false")?;
    if let Some(dir) = &opts.extension_dir {
        config = config.with("extension_directory", dir)?;
    }
    Ok(match path {
        Some(p) => duckdb::Connection::open_with_flags(p, config)?,
        None => duckdb::Connection::open_in_memory_with_flags(config)?,
    })
}

/// The mixed-type rows of the large-result benchmarks, generated.
fn generated_select(n: u64) -> String {
    format!(
        "SELECT i::INTEGER AS i32, \
                (i * 2654435761) % 1000000007 - 500000000 AS i64, \
                (hash(i) % 1000000007) / 997.0 AS f64, \
                'item-' || (i % 1000003)::VARCHAR || '-' || (i % 7)::VARCHAR AS txt, \
                TIMESTAMP '2024-01-01 00:00:00' + to_microseconds(i * 1234567) AS ts, \
                ((i % 10000000) * 1.001)::DECIMAL(18,3) AS dec \
         FROM range({n}) t(i)"
    )
}

fn table_name(n: u64) -> String {
    format!("wide_{n}")
}

/// Creates the database the gateway reads, and a copy for the in-process
/// side (a DuckDB file can be open in one process only).
fn prepare_data(opts: &Opts) -> Result<()> {
    let db = opts.db_path();
    let _ = std::fs::remove_file(&db);
    let _ = std::fs::remove_file(opts.inproc_db_path());
    let started = Instant::now();
    {
        let conn = open_inproc(Some(&db), opts)?;
        let mut sizes = opts.sizes.to_vec();
        sizes.push(opts.small_table_rows);
        sizes.sort();
        sizes.dedup();
        for n in sizes {
            conn.execute_batch(&format!(
                "CREATE TABLE {} AS {}",
                table_name(n),
                generated_select(n)
            ))?;
        }
        conn.execute_batch("CHECKPOINT")?;
    }
    std::fs::copy(&db, opts.inproc_db_path())?;
    log(format!(
        "data: {} ({} MB) in {:.1} s",
        db.display(),
        std::fs::metadata(&db)?.len() >> 20,
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

struct Load {
    qps: f64,
    p50_ms: f64,
    p99_ms: f64,
    requests: u64,
    failures: u64,
}

impl Load {
    fn show(&self) -> String {
        format!(
            "{:.0} q/s, p50 {}, p99 {}",
            self.qps,
            ms(self.p50_ms),
            ms(self.p99_ms)
        )
    }
}

/// `clients` threads, each on its own connection of one database, run `sql`
/// (prepare, execute, fetch the Arrow result) back to back for `secs`.
fn inproc_load(conn: &duckdb::Connection, sql: &str, clients: usize, secs: f64) -> Result<Load> {
    let conns = (0..clients)
        .map(|_| conn.try_clone())
        .collect::<duckdb::Result<Vec<_>>>()?;
    let go = Instant::now();
    let deadline = go + Duration::from_secs_f64(secs);
    let handles: Vec<_> = conns
        .into_iter()
        .map(|c| {
            let sql = sql.to_string();
            std::thread::spawn(move || -> Result<Vec<f64>> {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    let mut stmt = c.prepare(&sql)?;
                    let batches: Vec<RecordBatch> = stmt.query_arrow([])?.collect();
                    std::hint::black_box(&batches);
                    lat.push(t0.elapsed().as_secs_f64() * 1000.0);
                }
                Ok(lat)
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().map_err(|_| anyhow!("load thread panicked"))??);
    }
    let elapsed = go.elapsed().as_secs_f64();
    all.sort_by(|a, b| a.total_cmp(b));
    Ok(Load {
        qps: all.len() as f64 / elapsed,
        p50_ms: percentile(&all, 0.5),
        p99_ms: percentile(&all, 0.99),
        requests: all.len() as u64,
        failures: 0,
    })
}

fn copy_sql(select: &str, format: &str, target: &str) -> String {
    let options = match format {
        "csv" => "FORMAT csv, HEADER true",
        "json" => "FORMAT json, ARRAY true",
        "ndjson" => "FORMAT json",
        "parquet" => "FORMAT parquet",
        _ => unreachable!("copy format {format}"),
    };
    format!("COPY ({select}) TO '{target}' ({options})")
}

/// Seconds for DuckDB to write the result to /dev/null in `format`.
fn inproc_copy(conn: &duckdb::Connection, select: &str, format: &str) -> Result<f64> {
    let t0 = Instant::now();
    conn.execute_batch(&copy_sql(select, format, "/dev/null"))?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Bytes DuckDB writes for the result in `format` (a COPY into a FIFO whose
/// reader counts; not timed).
fn inproc_copy_bytes(
    conn: &duckdb::Connection,
    select: &str,
    format: &str,
    work: &Path,
) -> Result<u64> {
    let fifo = work.join(format!("copy-{format}.fifo"));
    let _ = std::fs::remove_file(&fifo);
    let ok = Command::new("mkfifo").arg(&fifo).status()?.success();
    if !ok {
        bail!("mkfifo failed");
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || -> std::io::Result<u64> {
            let mut f = std::fs::File::open(fifo)?;
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                let k = f.read(&mut buf)?;
                if k == 0 {
                    return Ok(n);
                }
                n += k as u64;
            }
        })
    };
    let result = conn.execute_batch(&copy_sql(select, format, &fifo.to_string_lossy()));
    if result.is_err() {
        // Unblock the reader if DuckDB never opened the FIFO.
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
    }
    let bytes = reader
        .join()
        .map_err(|_| anyhow!("fifo reader panicked"))??;
    let _ = std::fs::remove_file(&fifo);
    result?;
    Ok(bytes)
}

/// Seconds to produce the result as Arrow record batches (the gateway's own
/// path: prepare, streaming execution, one batch per chunk), and the batches'
/// in-memory size.
fn inproc_arrow(conn: &duckdb::Connection, select: &str) -> Result<(f64, u64)> {
    let t0 = Instant::now();
    let mut stmt = conn.prepare(select)?;
    let _ = stmt.stream_arrow([])?;
    let mut bytes = 0u64;
    while let Some(sa) = stmt.step()? {
        let batch = RecordBatch::from(&sa);
        bytes += batch.get_array_memory_size() as u64;
        std::hint::black_box(&batch);
    }
    Ok((t0.elapsed().as_secs_f64(), bytes))
}

// ---------------------------------------------------------------- wrk

fn run_bounded(mut cmd: Command, limit: Duration) -> Result<String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()?;
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{cmd:?} ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = out_t.join().unwrap_or_default();
    let err = err_t.join().unwrap_or_default();
    if !status.success() {
        bail!("{cmd:?} failed ({status}): {err}");
    }
    Ok(out)
}

/// wrk with a POST of `body` from `conns` connections for `secs`.
fn wrk(opts: &Opts, url: &str, body: &Value, conns: usize, secs: u64) -> Result<Load> {
    let script = opts.work.join("post.lua");
    let body = body.to_string();
    if body.contains("]==]") {
        bail!("body not quotable in Lua");
    }
    std::fs::write(
        &script,
        format!(
            r#"wrk.method = "POST"
wrk.body = [==[{body}]==]
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH %d %d %d %d %d %d %d %d %d %d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.status, e.connect, e.read, e.write, e.timeout))
end
"#
        ),
    )?;
    let mut cmd = Command::new("wrk");
    cmd.args([
        "-t1",
        &format!("-c{conns}"),
        &format!("-d{secs}s"),
        "--timeout",
        "10s",
        "-s",
    ])
    .arg(&script)
    .arg(url);
    let out = run_bounded(cmd, Duration::from_secs(secs + 30))?;
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("BENCH "))
        .ok_or_else(|| anyhow!("wrk printed no summary: {out}"))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse::<f64>().map(|v| v as u64))
        .collect::<Result<_, _>>()?;
    let (requests, dur_us) = (f[0], f[1].max(1));
    let failures = f[5] + f[6] + f[7] + f[8] + f[9];
    Ok(Load {
        qps: requests as f64 / (dur_us as f64 / 1e6),
        p50_ms: f[2] as f64 / 1000.0,
        p99_ms: f[3] as f64 / 1000.0,
        requests,
        failures,
    })
}

// ---------------------------------------------------------------- 1. small queries

fn bench_small(opts: &Opts, table: &mut Table) -> Result<()> {
    let n = opts.clients;
    let small = table_name(opts.small_table_rows);
    let point = format!(
        "SELECT count(*) AS n, sum(i64) AS s, avg(f64) AS a FROM {small} WHERE i32 = {}",
        opts.small_table_rows / 2 + 4242
    );
    let cases = [
        ("SELECT 42".to_string(), "SELECT 42".to_string()),
        (
            format!(
                "point aggregate over {} rows",
                human_rows(opts.small_table_rows)
            ),
            point,
        ),
    ];
    let g = Gateway::start(
        opts,
        "small",
        &[("DUCKGATE_DATABASE", opts.db_path().display().to_string())],
    )?;
    let conn = open_inproc(Some(&opts.inproc_db_path()), opts)?;
    for (label, sql) in cases {
        let name = format!("small: {label}, {n} clients");
        let result = (|| -> Result<()> {
            let body = query_body(&sql, "json", 1000);
            // Warm up both sides (plans, buffers, connections).
            wrk(opts, &g.url("/query"), &body, n, 1)?;
            inproc_load(&conn, &sql, n, 0.5)?;
            // Alternating rounds, each a pair (see `bench_cpu`): on two
            // cores shared with wrk, one round of a side alone moved the
            // ratio between 0.71 and 0.96 from run to run.
            let rounds = if opts.quick { 1 } else { 3 };
            let secs = (opts.small_secs / rounds).max(1);
            let mut pairs = Vec::new();
            for _ in 0..rounds {
                let gw = wrk(opts, &g.url("/query"), &body, n, secs)?;
                let ip = inproc_load(&conn, &sql, n, secs as f64)?;
                if gw.failures > 0 {
                    bail!("{} of {} gateway requests failed", gw.failures, gw.requests);
                }
                pairs.push((gw.qps / ip.qps, gw, ip));
            }
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (lo, hi) = (pairs[0].0, pairs[pairs.len() - 1].0);
            let (ratio, gw, ip) = &pairs[pairs.len() / 2];
            let ratio = *ratio;
            table.add(
                "1",
                name.clone(),
                gw.show(),
                ip.show(),
                if rounds > 1 {
                    format!("{ratio:.2} (the median of {rounds} paired rounds, {lo:.2}-{hi:.2})")
                } else {
                    format!("{ratio:.2}")
                },
                "≥ 0.8",
                Some(ratio >= 0.8),
            );
            Ok(())
        })();
        if let Err(e) = result {
            table.failed("1", name, &e);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- 11. CPU per request

/// CPU of this process (user + system seconds, every thread: DuckDB's
/// workers included, as the gateway's figure includes its own).
fn own_cpu_secs() -> Result<f64> {
    cpu_secs(std::process::id())
}

/// The user and system CPU seconds of process `pid` so far
/// (`/proc/<pid>/stat`: after the command, utime is the 14th field and
/// stime the 15th).
fn proc_cpu(pid: u32) -> Result<(f64, f64)> {
    proc_cpu_at(&format!("/proc/{pid}/stat"))
}

/// The user and system CPU seconds in the stat file at `path` (a
/// process's or one of its threads').
fn proc_cpu_at(path: &str) -> Result<(f64, f64)> {
    let stat = std::fs::read_to_string(path)?;
    let after = stat.rfind(')').ok_or_else(|| anyhow!("unreadable stat"))?;
    let f: Vec<&str> = stat[after + 2..].split_whitespace().collect();
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((f[11].parse::<f64>()? / hz, f[12].parse::<f64>()? / hz))
}

/// The gateway's CPU per request (µs, user µs, system µs, requests): one
/// keep-alive client (wrk, a process of its own whose CPU is not counted)
/// sending `body` to `url` for `secs`, the gateway's `/proc/<pid>/stat`
/// read before and after. GET when `body` is `None`.
fn gateway_cpu(
    opts: &Opts,
    pid: u32,
    url: &str,
    body: Option<&Value>,
    secs: u64,
) -> Result<(f64, f64, f64, u64)> {
    let (u0, s0) = proc_cpu(pid)?;
    let load = match body {
        Some(b) => wrk(opts, url, b, 1, secs)?,
        None => wrk_get(opts, url, 1, secs)?,
    };
    let (u1, s1) = proc_cpu(pid)?;
    if load.failures > 0 || load.requests == 0 {
        bail!("{} of {} requests failed", load.failures, load.requests);
    }
    let n = load.requests as f64;
    let (u, s) = ((u1 - u0) * 1e6 / n, (s1 - s0) * 1e6 / n);
    Ok((u + s, u, s, load.requests))
}

/// Waits (at most 30 s) until the process `pid` is idle: under 2% of a
/// core over half a second.
fn settle(pid: u32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let before = cpu_secs(pid)?;
        std::thread::sleep(Duration::from_millis(500));
        if cpu_secs(pid)? - before < 0.01 {
            return Ok(());
        }
    }
    Ok(())
}

/// DuckDB's own CPU per query in this process (µs, queries): one thread on
/// one connection running `sql` back to back for `secs` (prepare, execute,
/// fetch the Arrow result, as `inproc_load`).
fn inproc_cpu(conn: &duckdb::Connection, sql: &str, secs: f64) -> Result<(f64, u64)> {
    let c = conn.try_clone()?;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let before = own_cpu_secs()?;
    let mut n = 0u64;
    while Instant::now() < deadline {
        let mut stmt = c.prepare(sql)?;
        let batches: Vec<RecordBatch> = stmt.query_arrow([])?.collect();
        std::hint::black_box(&batches);
        n += 1;
    }
    let used = own_cpu_secs()? - before;
    Ok((used * 1e6 / n.max(1) as f64, n))
}

/// wrk GETting `url` from `conns` connections for `secs`.
fn wrk_get(opts: &Opts, url: &str, conns: usize, secs: u64) -> Result<Load> {
    let script = opts.work.join("get.lua");
    std::fs::write(
        &script,
        r#"done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH %d %d %d %d %d %d %d %d %d %d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.status, e.connect, e.read, e.write, e.timeout))
end
"#,
    )?;
    let mut cmd = Command::new("wrk");
    cmd.args([
        "-t1",
        &format!("-c{conns}"),
        &format!("-d{secs}s"),
        "--timeout",
        "10s",
        "-s",
    ])
    .arg(&script)
    .arg(url);
    let out = run_bounded(cmd, Duration::from_secs(secs + 30))?;
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("BENCH "))
        .ok_or_else(|| anyhow!("wrk printed no summary: {out}"))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse::<f64>().map(|v| v as u64))
        .collect::<Result<_, _>>()?;
    let (requests, dur_us) = (f[0], f[1].max(1));
    Ok(Load {
        qps: requests as f64 / (dur_us as f64 / 1e6),
        p50_ms: f[2] as f64 / 1000.0,
        p99_ms: f[3] as f64 / 1000.0,
        requests,
        failures: f[5] + f[6] + f[7] + f[8] + f[9],
    })
}

/// A counter of the gateway's `/metrics` (0 when absent), read with a
/// plain HTTP/1.0 GET (this part of the benchmark is not async).
fn gateway_counter(g: &Gateway, name: &str) -> Result<f64> {
    let addr = g.base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .sum())
}

fn us(v: f64) -> String {
    format!("{v:.0} µs")
}

/// Row 11: CPU per request, the gateway's (`/proc/<pid>/stat`, one
/// keep-alive client) against DuckDB's own per query in this process, in
/// alternating rounds of the same run, each round's two sides a pair: the
/// ratio is the median of the pairs' ratios, so a slow minute of a shared
/// machine falls on both sides of a pair; and `/healthz` against a constant
/// axum answer in a process of its own (the cost of HTTP alone).
fn bench_cpu(opts: &Opts, table: &mut Table) -> Result<()> {
    let small = table_name(opts.small_table_rows);
    let point = format!(
        "SELECT count(*) AS n, sum(i64) AS s, avg(f64) AS a FROM {small} WHERE i32 = {}",
        opts.small_table_rows / 2 + 4242
    );
    let (rounds, secs) = if opts.quick { (1, 2) } else { (5, 3) };
    let g = Gateway::start(
        opts,
        "cpu",
        &[("DUCKGATE_DATABASE", opts.db_path().display().to_string())],
    )?;
    let conn = open_inproc(Some(&opts.inproc_db_path()), opts)?;
    let cases = [
        ("SELECT 42".to_string(), "SELECT 42".to_string(), 1.2),
        (
            format!(
                "point aggregate over {} rows",
                human_rows(opts.small_table_rows)
            ),
            point,
            1.2,
        ),
    ];
    for (label, sql, goal) in cases {
        let name = format!("CPU per request: {label}, one keep-alive client");
        let r = (|| -> Result<()> {
            let body = query_body(&sql, "json", 1000);
            // Warm-up: plans, caches, the inline path's first runs.
            wrk(opts, &g.url("/query"), &body, 1, 1)?;
            inproc_cpu(&conn, &sql, 0.5)?;
            // Nothing of the gateway's start (DuckDB opening the file, the
            // first checkpoint) counted as a request's.
            settle(g.pid())?;
            let (mut gw, mut gu, mut gs, mut ip) = (vec![], vec![], vec![], vec![]);
            let mut pairs = vec![];
            let (mut gn, mut inn) = (0, 0);
            let inline_before = gateway_counter(&g, "duckgate_queries_inline_total")?;
            for _ in 0..rounds {
                let (t, u, s, n) = gateway_cpu(opts, g.pid(), &g.url("/query"), Some(&body), secs)?;
                gw.push(t);
                gu.push(u);
                gs.push(s);
                gn += n;
                let (i, n) = inproc_cpu(&conn, &sql, secs as f64)?;
                ip.push(i);
                inn += n;
                pairs.push(t / i);
            }
            // How many ran on the request's own thread (`execute::inline`).
            let inline = gateway_counter(&g, "duckgate_queries_inline_total")? - inline_before;
            let (gw, ip) = (median(gw), median(ip));
            let (lo, hi) = pairs
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            let ratio = median(pairs);
            table.add(
                "11",
                name.clone(),
                format!(
                    "{} (user {}, system {}; {gn} requests, {:.0}% inline; /proc of the gateway)",
                    us(gw),
                    us(median(gu)),
                    us(median(gs)),
                    100.0 * inline / gn.max(1) as f64
                ),
                format!(
                    "{} ({inn} queries: prepare, execute, fetch Arrow; /proc of this process)",
                    us(ip)
                ),
                format!("{ratio:.2} (the median of {rounds} paired rounds, {lo:.2}-{hi:.2})"),
                format!("≤ {goal}"),
                Some(ratio <= goal),
            );
            Ok(())
        })();
        if let Err(e) = r {
            table.failed("11", name, &e);
        }
    }
    let name = "CPU per request: GET /healthz, one keep-alive client";
    let r = (|| -> Result<()> {
        let floor = Floor::start()?;
        let fpid = floor.child.id();
        wrk_get(opts, &g.url("/healthz"), 1, 1)?;
        wrk_get(opts, &floor.url, 1, 1)?;
        let (mut gw, mut fl) = (vec![], vec![]);
        for _ in 0..rounds {
            gw.push(gateway_cpu(opts, g.pid(), &g.url("/healthz"), None, secs)?.0);
            fl.push(gateway_cpu(opts, fpid, &floor.url, None, secs)?.0);
        }
        let (gw, fl) = (median(gw), median(fl));
        table.add(
            "11",
            name,
            format!("{} (/proc of the gateway)", us(gw)),
            format!("a constant axum answer in a process of its own: {}", us(fl)),
            format!("{:.2}", gw / fl),
            "(reported: the cost of HTTP alone)",
            None,
        );
        Ok(())
    })();
    if let Err(e) = r {
        table.failed("11", name, &e);
    }
    Ok(())
}

// ---------------------------------------------------------------- 9. the guard's own cost

/// The guard's work on a statement it has not seen (DuckDB's parse, its
/// serialized tree walked, the plan bound and walked) against DuckDB's own
/// time for the same statement in-process (prepare, execute, fetch), on the
/// same thread kind the gateway gives both (its 64 MiB stack). Medians of
/// `reps` cold runs each; the guard keeps no cache at this level.
fn bench_guard(opts: &Opts, table: &mut Table) -> Result<()> {
    let sum = |n: usize| {
        format!(
            "SELECT {}",
            (0..n)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" + ")
        )
    };
    let nest = |open: &str, close: &str, n: usize| {
        format!("SELECT {}1{}", open.repeat(n), close.repeat(n))
    };
    let cases: Vec<(String, String)> = vec![
        ("10-term sum".into(), sum(10)),
        ("30-term sum".into(), sum(30)),
        ("100-term sum".into(), sum(100)),
        ("500-term sum".into(), sum(500)),
        ("100-level parentheses".into(), nest("(", ")", 100)),
        ("100-level abs()".into(), nest("abs(", ")", 100)),
        (
            "100-level CASE".into(),
            nest("CASE WHEN true THEN ", " END", 100),
        ),
        ("100-level lists".into(), nest("[", "]", 100)),
    ];
    let reps = if opts.quick { 3 } else { 7 };
    std::thread::Builder::new()
        .stack_size(duckgate::engine::nesting::STACK_BYTES)
        .spawn(move || -> Result<Vec<(String, f64, f64)>> {
            let db = std::sync::Arc::new(duckgate::engine::ffi::RawDatabase::open(None, &[])?);
            let raw = db.connect_raw()?;
            let conn = db.connect()?;
            let rules = duckgate::engine::guard::Rules {
                policy: duckgate::config::Policy::ReadOnly,
                paths: Default::default(),
                client_schema: None,
                writable: Vec::new(),
                access: None,
                confined_plans: false,
            };
            let mut out = Vec::new();
            for (label, sql) in cases {
                let mut guard = Vec::new();
                let mut own = Vec::new();
                for _ in 0..reps {
                    let t = Instant::now();
                    duckgate::engine::guard::check(&raw, &sql, &rules)
                        .map_err(|r| anyhow::anyhow!("the guard refused {label}: {r:?}"))?;
                    guard.push(t.elapsed().as_secs_f64());
                    let t = Instant::now();
                    let mut stmt = conn.prepare(&sql)?;
                    let mut rows = stmt.query([])?;
                    while rows.next()?.is_some() {}
                    own.push(t.elapsed().as_secs_f64());
                }
                out.push((label, median(guard), median(own)));
            }
            Ok(out)
        })?
        .join()
        .map_err(|_| anyhow::anyhow!("the guard benchmark's thread panicked"))??
        .into_iter()
        .for_each(|(label, guard, own)| {
            let ratio = guard / own;
            table.add(
                "9",
                format!("guard, cold: {label}"),
                ms(guard * 1000.0),
                ms(own * 1000.0),
                format!("{ratio:.2}"),
                "≤ 2.0 (guard / DuckDB)",
                Some(ratio <= 2.0),
            );
        });
    Ok(())
}

// ---------------------------------------------------------------- 2. large results

fn goal_for(format: &str) -> f64 {
    match format {
        "json" | "ndjson" => 1.0,
        "csv" | "parquet" => 0.8,
        _ => 0.9,
    }
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs
}

async fn bench_large(opts: &Opts, table: &mut Table) -> Result<()> {
    let g = Gateway::start(
        opts,
        "large",
        &[("DUCKGATE_DATABASE", opts.db_path().display().to_string())],
    )?;
    let conn = open_inproc(Some(&opts.inproc_db_path()), opts)?;
    for n in opts.sizes {
        let t = table_name(n);
        let warm = format!(
            "SELECT count(*), max(i32), max(i64), max(f64), max(txt), max(ts), max(dec) FROM {t}"
        );
        query_json(&g, &warm).await?;
        conn.execute_batch(&warm)?;
        let select = format!("SELECT * FROM {t}");
        for format in ["json", "ndjson", "csv", "arrow", "parquet"] {
            let name = format!("large: {} rows, {}", human_rows(n), format.to_uppercase());
            let r: Result<()> = async {
                // Parquet as clients ask for it, with no row limit (the
                // table is under the default cap): a limit the client asks
                // for is a LIMIT in DuckDB, which runs on one thread past its
                // batch-limit threshold (docs/history.md, 2026-12-01 evening).
                let body = if format == "parquet" {
                    json!({"sql": select, "format": format, "timeout_ms": 600000})
                } else {
                    query_body(&select, format, n)
                };
                let mut gw_t = Vec::new();
                let mut ip_t = Vec::new();
                let mut gw_bytes = 0;
                let mut arrow_bytes = 0;
                // Arrow: where the CPU goes (the gateway's, its busiest
                // thread's, the in-process side's).
                let (mut gw_cpu, mut gw_thread, mut ip_cpu) = (Vec::new(), Vec::new(), Vec::new());
                for rep in 0..opts.reps {
                    let pid = g.child.id();
                    let (cpu0, threads0) = (cpu_secs(pid)?, thread_cpu(pid));
                    let (b, s) = fetch(&g.client, &g.url("/query"), &body).await?;
                    gw_bytes = b;
                    gw_t.push(s);
                    gw_cpu.push(cpu_secs(pid)? - cpu0);
                    gw_thread.push(busiest_thread(&threads0, &thread_cpu(pid)));
                    let secs = if format == "arrow" {
                        let cpu0 = own_cpu_secs()?;
                        let (s, b) = inproc_arrow(&conn, &select)?;
                        ip_cpu.push(own_cpu_secs()? - cpu0);
                        arrow_bytes = b;
                        s
                    } else {
                        inproc_copy(&conn, &select, format)?
                    };
                    ip_t.push(secs);
                    log(format!(
                        "{name} rep {rep}: gateway {:.2} s, in-process {:.2} s",
                        gw_t[rep], ip_t[rep]
                    ));
                }
                let (gs, is) = (median(gw_t), median(ip_t));
                let ip_bytes = if format == "arrow" {
                    arrow_bytes
                } else {
                    inproc_copy_bytes(&conn, &select, format, &opts.work)?
                };
                let ratio = is / gs;
                let what = match format {
                    "json" => "COPY … (FORMAT json, ARRAY true) → /dev/null",
                    "ndjson" => "COPY … (FORMAT json) → /dev/null",
                    "csv" => "COPY … (FORMAT csv) → /dev/null",
                    "parquet" => "COPY … (FORMAT parquet) → /dev/null",
                    _ => "stream_arrow batches (no IPC)",
                };
                let (gw_cpu_note, ip_cpu_note) = if format == "arrow" {
                    (
                        format!(
                            "; CPU {:.2} s, its busiest thread {:.2} s",
                            median(gw_cpu),
                            median(gw_thread)
                        ),
                        format!("; CPU {:.2} s", median(ip_cpu)),
                    )
                } else {
                    (String::new(), String::new())
                };
                table.add(
                    "2",
                    name.clone(),
                    format!(
                        "{gs:.2} s, {:.0} MB/s ({} MB){gw_cpu_note}",
                        mbps(gw_bytes, gs),
                        gw_bytes / 1_000_000
                    ),
                    format!(
                        "{is:.2} s, {:.0} MB/s ({} MB); {what}{ip_cpu_note}",
                        mbps(ip_bytes, is),
                        ip_bytes / 1_000_000
                    ),
                    format!("{ratio:.2}"),
                    format!("≥ {:.1}", goal_for(format)),
                    Some(ratio >= goal_for(format)),
                );
                Ok(())
            }
            .await;
            if let Err(e) = r {
                table.failed("2", name, &e);
            }
            // Compression: bytes on the wire and time to the last byte, as
            // the client asks (identity, gzip, zstd). Parquet compresses its
            // own pages (snappy) and is sent as it is.
            if format == "parquet" {
                continue;
            }
            let r: Result<()> = async {
                let body = query_body(&select, format, n);
                let (plain_b, plain_s) =
                    fetch_encoded(&g.client, &g.url("/query"), &body, "identity").await?;
                for encoding in ["gzip", "zstd"] {
                    let (b, s) =
                        fetch_encoded(&g.client, &g.url("/query"), &body, encoding).await?;
                    table.add(
                        "2c",
                        format!(
                            "compression: {} rows, {}, {encoding}",
                            human_rows(n),
                            format.to_uppercase()
                        ),
                        format!("{s:.2} s, {:.1} MB on the wire", b as f64 / 1e6),
                        format!(
                            "uncompressed: {plain_s:.2} s, {:.1} MB",
                            plain_b as f64 / 1e6
                        ),
                        format!(
                            "{:.1}x smaller, {:.2}x the time",
                            plain_b as f64 / b.max(1) as f64,
                            s / plain_s
                        ),
                        "—",
                        None,
                    );
                }
                Ok(())
            }
            .await;
            if let Err(e) = r {
                table.failed("2c", format!("compression: {}", format.to_uppercase()), &e);
            }
        }
    }
    Ok(())
}

/// POSTs a query asking for `encoding` and reads the body as it comes over
/// the wire (not decoded). Returns (bytes on the wire, seconds to the last
/// byte).
async fn fetch_encoded(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    encoding: &str,
) -> Result<(u64, f64)> {
    let started = Instant::now();
    let resp = client
        .post(url)
        .header("accept-encoding", encoding)
        .json(body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("HTTP {}", resp.status());
    }
    let mut stream = resp.bytes_stream();
    let mut bytes = 0u64;
    while let Some(chunk) = stream.next().await {
        bytes += chunk.context("body ended abnormally")?.len() as u64;
    }
    Ok((bytes, started.elapsed().as_secs_f64()))
}

// ---------------------------------------------------------------- 10. flight

/// User and system CPU seconds `pid` has used (`/proc/<pid>/stat`).
fn cpu_secs(pid: u32) -> Result<f64> {
    proc_cpu(pid).map(|(u, s)| u + s)
}

/// User and system CPU seconds of each thread of `pid` so far, by thread
/// id (`/proc/<pid>/task/<tid>/stat`); a thread that cannot be read is
/// left out.
fn thread_cpu(pid: u32) -> std::collections::HashMap<u32, f64> {
    let mut out = std::collections::HashMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok((u, s)) = proc_cpu_at(&format!("/proc/{pid}/task/{tid}/stat")) {
            out.insert(tid, u + s);
        }
    }
    out
}

/// The most CPU one thread used between two [`thread_cpu`] readings (a
/// thread that began between them counts from zero; one that ended is
/// not seen).
fn busiest_thread(
    before: &std::collections::HashMap<u32, f64>,
    after: &std::collections::HashMap<u32, f64>,
) -> f64 {
    after
        .iter()
        .map(|(tid, t)| t - before.get(tid).copied().unwrap_or(0.0))
        .fold(0.0, f64::max)
}

/// Runs `sql` over Flight SQL (GetFlightInfo, then DoGet of each endpoint)
/// and decodes every batch. Returns (rows, seconds to the last batch).
async fn flight_fetch(uri: &str, sql: &str) -> Result<(u64, f64)> {
    use arrow_flight::sql::client::FlightSqlServiceClient;
    let started = Instant::now();
    let channel = tonic::transport::Endpoint::from_shared(uri.to_string())?
        .connect()
        .await?;
    let mut client = FlightSqlServiceClient::new(channel);
    let info = client.execute(sql.to_string(), None).await?;
    let mut rows = 0u64;
    for endpoint in info.endpoint {
        let ticket = endpoint
            .ticket
            .ok_or_else(|| anyhow!("an endpoint without a ticket"))?;
        let mut batches = client.do_get(ticket).await?;
        while let Some(batch) = batches.next().await {
            rows += batch?.num_rows() as u64;
        }
    }
    Ok((rows, started.elapsed().as_secs_f64()))
}

/// The same 10M rows over Flight SQL and as Arrow over HTTP (`POST
/// /query`), alternating, on one gateway: the ratio of wall time and of the
/// gateway's CPU (from /proc) per fetch. The HTTP client counts bytes; the
/// Flight client decodes batches (as every Flight client does).
async fn bench_flight(opts: &Opts, table: &mut Table) -> Result<()> {
    let n = opts.sizes[1];
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let g = Gateway::start(
        opts,
        "flight",
        &[
            ("DUCKGATE_DATABASE", opts.db_path().display().to_string()),
            ("DUCKGATE_FLIGHT_LISTEN", format!("127.0.0.1:{port}")),
            ("DUCKGATE_QUERY_TIMEOUT_MS", "600000".into()),
        ],
    )?;
    let uri = format!("http://127.0.0.1:{port}");
    let t = table_name(n);
    let select = format!("SELECT * FROM {t}");
    query_json(&g, &format!("SELECT count(*), max(txt) FROM {t}")).await?;
    let name = format!(
        "flight: {} rows over Flight SQL vs Arrow over HTTP",
        human_rows(n)
    );
    let body = query_body(&select, "arrow", n);
    let (mut ft, mut fc, mut ht, mut hc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut http_bytes = 0;
    for rep in 0..opts.reps {
        let c0 = cpu_secs(g.pid())?;
        let (rows, secs) = flight_fetch(&uri, &select).await?;
        if rows != n {
            bail!("Flight SQL returned {rows} rows, not {n}");
        }
        let c1 = cpu_secs(g.pid())?;
        let (bytes, hsecs) = fetch(&g.client, &g.url("/query"), &body).await?;
        let c2 = cpu_secs(g.pid())?;
        http_bytes = bytes;
        ft.push(secs);
        fc.push(c1 - c0);
        ht.push(hsecs);
        hc.push(c2 - c1);
        log(format!(
            "{name} rep {rep}: Flight {secs:.2} s ({:.2} s CPU), HTTP {hsecs:.2} s ({:.2} s CPU)",
            c1 - c0,
            c2 - c1
        ));
    }
    let (fs, fcpu, hs, hcpu) = (median(ft), median(fc), median(ht), median(hc));
    table.add(
        "10",
        name,
        format!("Flight SQL {fs:.2} s, gateway CPU {fcpu:.2} s"),
        format!(
            "HTTP Arrow {hs:.2} s ({} MB), gateway CPU {hcpu:.2} s (same gateway, same run)",
            http_bytes / 1_000_000
        ),
        format!("{:.2} time, {:.2} CPU", hs / fs, hcpu / fcpu.max(1e-9)),
        "reported",
        None,
    );
    Ok(())
}

// ---------------------------------------------------------------- 7. statements

/// Polls `GET /statements/{id}` until it is no longer queued or running.
async fn statement_done(g: &Gateway, id: &str, limit: Duration) -> Result<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let v: Value = g
            .client
            .get(g.url(&format!("/statements/{id}")))
            .send()
            .await?
            .json()
            .await?;
        if v["state"] != "queued" && v["state"] != "running" {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("statement {id} still {} after {limit:?}", v["state"]);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Paging a spooled result as Arrow against the same result straight from
/// `/query`, and the cost of submit-and-poll for a small statement.
async fn bench_statements(opts: &Opts, table: &mut Table) -> Result<()> {
    let n = opts.sizes[1];
    let g = Gateway::start(
        opts,
        "statements",
        &[
            ("DUCKGATE_DATABASE", opts.db_path().display().to_string()),
            ("DUCKGATE_SPOOL_BYTES", "200GB".into()),
            ("DUCKGATE_SPOOL_STATEMENT_BYTES", "100GB".into()),
            ("DUCKGATE_MAX_STATEMENT_TIMEOUT_MS", "3600000".into()),
        ],
    )?;
    let t = table_name(n);
    let select = format!("SELECT * FROM {t}");
    query_json(&g, &format!("SELECT count(*), max(txt) FROM {t}")).await?;
    let name = format!("statements: {} rows paged as Arrow", human_rows(n));
    let r: Result<()> = async {
        let started = Instant::now();
        let v: Value = g
            .client
            .post(g.url("/statements"))
            .header("duckgate-query-id", "bench-paging")
            .json(&json!({"sql": select, "max_rows": n, "wait_ms": 0}))
            .send()
            .await?
            .json()
            .await?;
        if v["state"].is_null() {
            bail!("submit: {v}");
        }
        let done = statement_done(&g, "bench-paging", Duration::from_secs(1800)).await?;
        if done["state"] != "succeeded" {
            bail!("statement: {done}");
        }
        let spooled = started.elapsed().as_secs_f64();
        let page = (n / 10).max(1);
        let direct = query_body(&select, "arrow", n);
        let (mut paged_t, mut direct_t) = (Vec::new(), Vec::new());
        let mut paged_bytes = 0;
        for rep in 0..opts.reps {
            let (b, s) = fetch_get_pages(&g, "bench-paging", "arrow", page).await?;
            paged_bytes = b;
            paged_t.push(s);
            let (_, d) = fetch(&g.client, &g.url("/query"), &direct).await?;
            direct_t.push(d);
            log(format!(
                "{name} rep {rep}: pages {:.2} s, /query {:.2} s",
                paged_t[rep], direct_t[rep]
            ));
        }
        let (ps, ds) = (median(paged_t), median(direct_t));
        let ratio = ds / ps;
        table.add(
            "7",
            name.clone(),
            format!(
                "{ps:.2} s in pages of {}, {:.0} MB/s; spooled in {spooled:.2} s ({} MB spool)",
                human_rows(page),
                mbps(paged_bytes, ps),
                done["spool_bytes"].as_u64().unwrap_or(0) / 1_000_000
            ),
            format!("{ds:.2} s: the same rows from POST /query (Arrow)"),
            format!("{ratio:.2}"),
            "≥ 0.9 (of /query)",
            Some(ratio >= 0.9),
        );
        Ok(())
    }
    .await;
    if let Err(e) = r {
        table.failed("7", name, &e);
    }

    // A small statement: answered within wait_ms, and submit, poll, fetch.
    let name = "statements: SELECT 42, submit and poll".to_string();
    let r: Result<()> = async {
        let count = if opts.quick { 20 } else { 100 };
        let (mut inline, mut polled, mut direct) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..count {
            let t0 = Instant::now();
            fetch(
                &g.client,
                &g.url("/query"),
                &json!({"sql": "SELECT 42 AS x"}),
            )
            .await?;
            direct.push(t0.elapsed().as_secs_f64());
            let t0 = Instant::now();
            let r = g
                .client
                .post(g.url("/statements"))
                .json(&json!({"sql": "SELECT 42 AS x", "wait_ms": 10_000}))
                .send()
                .await?;
            if r.status() != 200 {
                bail!("wait_ms answer: {}", r.status());
            }
            let id = r.headers()["duckgate-query-id"].to_str()?.to_string();
            r.bytes().await?;
            inline.push(t0.elapsed().as_secs_f64());
            g.client
                .delete(g.url(&format!("/statements/{id}")))
                .send()
                .await?;
            let t0 = Instant::now();
            let id = format!("small-{i}");
            g.client
                .post(g.url("/statements"))
                .header("duckgate-query-id", &id)
                .json(&json!({"sql": "SELECT 42 AS x", "wait_ms": 0}))
                .send()
                .await?
                .bytes()
                .await?;
            statement_done(&g, &id, Duration::from_secs(30)).await?;
            g.client
                .get(g.url(&format!("/statements/{id}/result")))
                .send()
                .await?
                .bytes()
                .await?;
            polled.push(t0.elapsed().as_secs_f64());
            g.client
                .delete(g.url(&format!("/statements/{id}")))
                .send()
                .await?;
        }
        let (i, p, d) = (
            median(inline) * 1e3,
            median(polled) * 1e3,
            median(direct) * 1e3,
        );
        table.add(
            "7",
            name.clone(),
            format!("{i:.2} ms within wait_ms; {p:.2} ms submit + poll (20 ms interval) + result"),
            format!("{d:.2} ms: POST /query"),
            format!("+{:.2} ms", i - d),
            "reported",
            None,
        );
        Ok(())
    }
    .await;
    if let Err(e) = r {
        table.failed("7", name, &e);
    }
    Ok(())
}

/// Reads every page of a statement's result (`limit` rows each, following
/// `Link: rel="next"`). Returns (bytes, seconds).
async fn fetch_get_pages(g: &Gateway, id: &str, format: &str, limit: u64) -> Result<(u64, f64)> {
    let started = Instant::now();
    let mut bytes = 0u64;
    let mut next = Some(format!(
        "/statements/{id}/result?format={format}&offset=0&limit={limit}"
    ));
    while let Some(path) = next.take() {
        let resp = g.client.get(g.url(&path)).send().await?;
        if !resp.status().is_success() {
            bail!("{path}: HTTP {}", resp.status());
        }
        next = resp.headers().get("link").and_then(|l| {
            let l = l.to_str().ok()?;
            Some(l[l.find('<')? + 1..l.find('>')?].to_string())
        });
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            bytes += chunk.context("page ended abnormally")?.len() as u64;
        }
    }
    Ok((bytes, started.elapsed().as_secs_f64()))
}

// ---------------------------------------------------------------- 3. memory

fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
}

/// Peak RSS (MB) of a fresh gateway serving `n` generated rows in `format`:
/// (idle RSS, sampled peak VmRSS, VmHWM). `page`: the rows are first
/// spooled as an async statement, then fetched as one result page (a
/// Parquet page is written from the spool by DuckDB's own writer).
async fn peak_rss(opts: &Opts, format: &str, n: u64, page: bool) -> Result<(f64, f64, f64, u64)> {
    let g = Gateway::start(opts, &format!("memory-{format}-{n}-{page}"), &[])?;
    let pid = g.pid();
    query_json(&g, "SELECT 1").await?;
    if page {
        let v: Value = g
            .client
            .post(g.url("/statements"))
            .header("duckgate-query-id", "bench-memory")
            .json(&json!({"sql": generated_select(n), "wait_ms": 0}))
            .send()
            .await?
            .json()
            .await?;
        if v["state"].is_null() {
            bail!("submit: {}", v["title"]);
        }
        let done = statement_done(&g, "bench-memory", Duration::from_secs(1800)).await?;
        if done["state"] != "succeeded" {
            bail!("statement: {}", done["state"]);
        }
    }
    let idle = proc_status_kb(pid, "VmRSS").unwrap_or(0);
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(kb) = proc_status_kb(pid, "VmRSS") {
                    peak.fetch_max(kb, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let result = if page {
        fetch_get_pages(&g, "bench-memory", format, n).await
    } else {
        fetch(
            &g.client,
            &g.url("/query"),
            &query_body(&generated_select(n), format, n),
        )
        .await
    };
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let (bytes, _) = result?;
    let hwm = proc_status_kb(pid, "VmHWM").unwrap_or(0);
    let mb = |kb: u64| kb as f64 / 1024.0;
    Ok((mb(idle), mb(peak.load(Ordering::Relaxed)), mb(hwm), bytes))
}

async fn bench_memory(opts: &Opts, table: &mut Table) -> Result<()> {
    let [a, b] = opts.sizes;
    let cases = [
        ("json", false),
        ("ndjson", false),
        ("csv", false),
        ("arrow", false),
        ("parquet", false),
        ("parquet", true),
    ];
    for (format, page) in cases {
        let name = format!(
            "memory: peak RSS, {}{}, {} vs {} rows",
            format.to_uppercase(),
            if page { " statement page" } else { "" },
            human_rows(b),
            human_rows(a)
        );
        let r: Result<()> = async {
            let (idle_a, rss_a, hwm_a, _) = peak_rss(opts, format, a, page).await?;
            let (idle_b, rss_b, hwm_b, bytes_b) = peak_rss(opts, format, b, page).await?;
            log(format!(
                "{name}: idle {idle_a:.0}/{idle_b:.0} MB, sampled {rss_a:.0}/{rss_b:.0} MB, \
                 VmHWM {hwm_a:.0}/{hwm_b:.0} MB, {} MB sent",
                bytes_b >> 20
            ));
            let ratio = hwm_b / hwm_a;
            table.add(
                "3",
                name.clone(),
                format!(
                    "{}: {hwm_a:.0} MB; {}: {hwm_b:.0} MB (VmHWM; idle {idle_a:.0} MB; {} MB sent)",
                    human_rows(a),
                    human_rows(b),
                    bytes_b / 1_000_000
                ),
                "—",
                format!("{ratio:.2}×"),
                "≤ 1.5×",
                Some(ratio <= 1.5),
            );
            Ok(())
        }
        .await;
        if let Err(e) = r {
            table.failed("3", name, &e);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- 4. /healthz

struct Probe {
    sent: usize,
    failed: usize,
    rate: f64,
    p50: f64,
    p99: f64,
    max: f64,
    /// Every answered probe's latency (ms), sorted.
    lat: Vec<f64>,
}

impl Probe {
    fn show(&self) -> String {
        format!(
            "p50 {}, p99 {}, max {} ({} probes at {:.0}/s)",
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.sent,
            self.rate
        )
    }
}

/// Open-loop: one GET every `1/rate` s for `secs`, each on time whatever the
/// others do; latency from send to the end of the body.
async fn probe(url: &str, rate: u32, secs: f64) -> Result<Probe> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let total = (rate as f64 * secs) as u64;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let mut set = tokio::task::JoinSet::new();
    let start = tokio::time::Instant::now();
    for i in 0..total {
        tokio::time::sleep_until(start + period * i as u32).await;
        let (client, url) = (client.clone(), url.to_string());
        set.spawn(async move {
            let t0 = Instant::now();
            let ok = match client.get(url).send().await {
                Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                Err(_) => false,
            };
            (ok, t0.elapsed().as_secs_f64() * 1000.0)
        });
    }
    let sent_for = start.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    let mut failed = 0;
    while let Some(r) = set.join_next().await {
        let (ok, l) = r?;
        if ok {
            lat.push(l);
        } else {
            failed += 1;
        }
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    Ok(Probe {
        sent: total as usize,
        failed,
        rate: total as f64 / sent_for,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        max: lat.last().copied().unwrap_or(f64::NAN),
        lat,
    })
}

/// Probe runs of one target taken in turns with others, as one.
fn merged(runs: Vec<Probe>) -> Probe {
    let (mut sent, mut failed, mut rate, mut lat) = (0, 0, 0.0, Vec::new());
    let k = runs.len().max(1) as f64;
    for r in runs {
        sent += r.sent;
        failed += r.failed;
        rate += r.rate / k;
        lat.extend(r.lat);
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    Probe {
        sent,
        failed,
        rate,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        max: lat.last().copied().unwrap_or(f64::NAN),
        lat,
    }
}

/// The control of row 4: a constant answer from the gateway's HTTP stack
/// (axum on hyper, one thread) in a process of its own, at the gateway's
/// niceness. The same probes against it show what the client and the
/// machine add to any answer, so a p99 above it is the gateway's and one at
/// it is not. Prints its port; exits when its stdin closes.
fn floor_server() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("{}", listener.local_addr()?.port());
        std::io::stdout().flush()?;
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            std::process::exit(0);
        });
        let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok\n" }));
        axum::serve(listener, app).await?;
        Ok(())
    })
}

/// The in-process side of the analytical rows (`bench/tpch.py`): DuckDB on
/// one database file, linked the same way as the gateway, answering one
/// statement per stdin line. Usage: `bench --sql-server FILE THREADS`; each
/// line is a JSON object `{"sql": "...", "text": false, "reuse": false}`;
/// the answer is one line `{"ms": wall ms of prepare + execute + every
/// batch, "rows": n}`, with `"text"` (the last column's values joined, for
/// `EXPLAIN ANALYZE`) when asked, or `{"error": "..."}`. With `"reuse"` a
/// text's prepared statement is kept and run again, as the gateway keeps
/// [`STATEMENT_CACHE`](duckgate::engine::pool::STATEMENT_CACHE) per
/// connection: the engine without the planning the gateway saves. The file
/// is opened read-only, so a gateway can hold a copy of it; exits at the
/// end of stdin.
fn sql_server() -> Result<()> {
    let mut args = std::env::args().skip(2);
    let path = PathBuf::from(args.next().context("--sql-server FILE THREADS")?);
    let threads: i64 = args
        .next()
        .context("--sql-server FILE THREADS")?
        .parse()
        .context("THREADS")?;
    let config = duckdb::Config::default()
        .threads(threads)?
        .access_mode(duckdb::AccessMode::ReadOnly)?
        .enable_autoload_extension(false)?
        .with("autoinstall_known_extensions", "false")?;
    let conn = duckdb::Connection::open_with_flags(&path, config)?;
    conn.set_prepared_statement_cache_capacity(duckgate::engine::pool::STATEMENT_CACHE);
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let request: Value = serde_json::from_str(&line?)?;
        let sql = request["sql"].as_str().context("sql")?;
        let text = request["text"].as_bool().unwrap_or(false);
        let reuse = request["reuse"].as_bool().unwrap_or(false);
        let started = Instant::now();
        let answer = (|| -> Result<Value> {
            let (mut cached, mut fresh);
            let stmt: &mut duckdb::Statement = if reuse {
                cached = conn.prepare_cached(sql)?;
                &mut cached
            } else {
                fresh = conn.prepare(sql)?;
                &mut fresh
            };
            let batches: Vec<RecordBatch> = stmt.query_arrow([])?.collect();
            let ms = started.elapsed().as_secs_f64() * 1e3;
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            let mut answer = json!({ "ms": ms, "rows": rows });
            if text {
                let mut joined = String::new();
                for b in &batches {
                    let column = arrow::compute::cast(
                        b.column(b.num_columns() - 1),
                        &arrow::datatypes::DataType::Utf8,
                    )?;
                    let column = arrow::array::AsArray::as_string::<i32>(&column);
                    for v in column.iter().flatten() {
                        joined.push_str(v);
                        joined.push('\n');
                    }
                }
                answer["text"] = Value::String(joined);
            }
            Ok(answer)
        })()
        .unwrap_or_else(|e| json!({ "error": format!("{e:#}") }));
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(())
}

/// A running [`floor_server`].
struct Floor {
    child: Child,
    url: String,
}

impl Floor {
    fn start() -> Result<Floor> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--floor-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("floor server stdout")?).read_line(&mut line)?;
        let port: u16 = line.trim().parse().context("floor server port")?;
        Ok(Floor {
            child,
            url: format!("http://127.0.0.1:{port}/healthz"),
        })
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn bench_health(opts: &Opts, table: &mut Table) -> Result<()> {
    let n = opts.clients;
    let name = format!(
        "/healthz at 1000/s for {} s, {n} long queries running + 2 waiting",
        opts.health_secs
    );
    let r: Result<()> = async {
        // The probes also on an address of their own (DUCKGATE_PROBE_LISTEN),
        // measured the same way under the same saturation.
        let probe_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let g = Gateway::start(
            opts,
            "health",
            &[
                ("DUCKGATE_ACQUIRE_TIMEOUT_MS", "600000".to_string()),
                ("DUCKGATE_PROBE_LISTEN", format!("127.0.0.1:{probe_port}")),
            ],
        )?;
        let url = g.url("/healthz");
        let probe_url = format!("http://127.0.0.1:{probe_port}/healthz");
        let floor = Floor::start()?;
        let idle = probe(&url, 1000, opts.health_secs.min(5) as f64).await?;
        let idle_own = probe(&probe_url, 1000, opts.health_secs.min(5) as f64).await?;
        let idle_floor = probe(&floor.url, 1000, opts.health_secs.min(5) as f64).await?;
        // Saturate: every pool connection runs a long query, two more wait.
        let busy_client = reqwest::Client::new();
        // Long enough for the three probe runs (main address, probe address,
        // the control).
        let timeout_ms = (3 * opts.health_secs + 30) * 1000;
        let mut long = Vec::new();
        for _ in 0..n + 2 {
            let (c, u) = (busy_client.clone(), g.url("/query"));
            let body = json!({"sql": LONG_QUERY, "timeout_ms": timeout_ms});
            long.push(tokio::spawn(async move {
                let _ = c.post(u).json(&body).send().await;
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let h = g.health().await?;
            if h["pool"]["in_use"].as_u64() == Some(n as u64)
                && h["pool"]["waiting"].as_u64().unwrap_or(0) >= 2
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("the pool never filled: {h}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The main address, the probe address and the control in turns
        // (rounds of a few seconds), so that what the machine does in one
        // moment weighs on all three alike.
        let rounds = if opts.quick { 1 } else { 6 };
        let chunk = opts.health_secs as f64 / rounds as f64;
        let (mut busy, mut busy_own, mut busy_floor) = (vec![], vec![], vec![]);
        for _ in 0..rounds {
            busy.push(probe(&url, 1000, chunk).await?);
            busy_own.push(probe(&probe_url, 1000, chunk).await?);
            busy_floor.push(probe(&floor.url, 1000, chunk).await?);
        }
        let (busy, busy_own, busy_floor) = (merged(busy), merged(busy_own), merged(busy_floor));
        let h = g.health().await?;
        let still = h["pool"]["in_use"].as_u64() == Some(n as u64);
        for t in long {
            t.abort();
        }
        drop(g);
        if !still {
            bail!("the pool drained during the probe run: {h}");
        }
        let failed = busy.failed + idle.failed + busy_own.failed + idle_own.failed
            + busy_floor.failed
            + idle_floor.failed;
        if failed > 0 {
            bail!("{failed} probes failed");
        }
        // The goal is against the floor of the machine measured in the same
        // minutes: the control's p99 under the same saturation.
        let main_ratio = busy.p99 / busy_floor.p99;
        let own_ratio = busy_own.p99 / busy_floor.p99;
        table.add(
            "4",
            name.clone(),
            busy.show(),
            format!(
                "the control (below): p99 {}; same gateway idle: {}",
                ms(busy_floor.p99),
                idle.show()
            ),
            format!("{main_ratio:.2}"),
            "p99 ≤ 1.2 × the control's",
            Some(main_ratio <= 1.2),
        );
        table.add(
            "4",
            name.replacen("/healthz", "/healthz on DUCKGATE_PROBE_LISTEN", 1),
            busy_own.show(),
            format!(
                "the control (below): p99 {}; same gateway idle: {}",
                ms(busy_floor.p99),
                idle_own.show()
            ),
            format!("{own_ratio:.2}"),
            "p99 ≤ 1.2 × the control's",
            Some(own_ratio <= 1.2),
        );
        table.add(
            "4",
            "control: a constant answer from axum in a process of its own, same probes, same saturation, in turns with the two rows above",
            busy_floor.show(),
            format!("same server, gateway idle: {}", idle_floor.show()),
            "—",
            "the floor of the two rows above",
            None,
        );
        Ok(())
    }
    .await;
    if let Err(e) = r {
        table.failed("4", name, &e);
    }
    Ok(())
}

// ---------------------------------------------------------------- 5 & 6. S3

struct S3Emulation {
    child: Child,
    _stdin: ChildStdin,
    config: Value,
}

impl S3Emulation {
    fn start(opts: &Opts, seed_rows: u64) -> Result<S3Emulation> {
        let python = opts.python.as_ref().ok_or_else(|| {
            anyhow!("DUCKGATE_TEST_PYTHON is not set (eval \"$(scripts/test-env)\")")
        })?;
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/s3_sts_server.py"
        );
        let stderr = std::fs::File::create(opts.work.join("s3-emulation.log"))?;
        let mut child = Command::new(python)
            .arg(script)
            .args(["--port", "0", "--exit-with-stdin", "--seed-parquet"])
            .arg(seed_rows.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .context("starting the S3/STS emulation")?;
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<Option<Value>>();
        std::thread::spawn(move || {
            let mut config = Value::Null;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(j) = line.strip_prefix("CONFIG ") {
                    config = serde_json::from_str(j.trim()).unwrap_or(Value::Null);
                } else if line.starts_with("READY ") {
                    let _ = tx.send(Some(config.clone()));
                    return;
                }
            }
            let _ = tx.send(None);
        });
        let mut emu = S3Emulation {
            child,
            _stdin: stdin,
            config: Value::Null,
        };
        match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(Some(config)) => emu.config = config,
            Ok(None) => bail!(
                "the S3 emulation exited before READY (see {}/s3-emulation.log)",
                opts.work.display()
            ),
            Err(_) => bail!("the S3 emulation was not ready within 600 s"),
        }
        Ok(emu)
    }

    fn s(&self, key: &str) -> String {
        self.config[key].as_str().unwrap_or_default().to_string()
    }

    /// The gateway environment of tests/common's `S3Server::gateway`.
    fn gateway_env(&self, opts: &Opts) -> Vec<(&'static str, String)> {
        vec![
            (
                "DUCKGATE_EXTENSION_DIR",
                opts.extension_dir.clone().unwrap_or_default(),
            ),
            ("AWS_ACCESS_KEY_ID", self.s("access_key_id")),
            ("AWS_SECRET_ACCESS_KEY", self.s("secret_access_key")),
            ("AWS_REGION", self.s("region")),
            ("DUCKGATE_S3_ROLE_ARN", self.s("role_arn")),
            ("DUCKGATE_S3_SESSION_DURATION_SECS", "3600".into()),
            ("DUCKGATE_S3_REGION", self.s("region")),
            ("DUCKGATE_S3_ENDPOINT", self.s("endpoint")),
            ("DUCKGATE_S3_URL_STYLE", "path".into()),
            ("DUCKGATE_S3_USE_SSL", "false".into()),
            ("DUCKGATE_S3_SCOPE", "s3://duckgate-test/".into()),
            ("DUCKGATE_STS_ENDPOINT", self.s("sts_endpoint")),
            ("DUCKGATE_ADMIN_TOKEN", ADMIN_TOKEN.into()),
        ]
    }

    /// The in-process side: assume the role with aws-sdk-sts against the
    /// emulation, then install the same secret the gateway's rotator installs.
    async fn inproc_connection(&self, opts: &Opts) -> Result<duckdb::Connection> {
        let base = aws_sdk_sts::config::Credentials::new(
            self.s("access_key_id"),
            self.s("secret_access_key"),
            None,
            None,
            "bench",
        );
        let config = aws_sdk_sts::Config::builder()
            .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
            // The gateway's client: the SDK's default one is not compiled.
            .http_client(duckgate::credentials::http::client())
            .region(aws_sdk_sts::config::Region::new(self.s("region")))
            .endpoint_url(self.s("sts_endpoint"))
            .credentials_provider(base)
            .build();
        let sts = aws_sdk_sts::Client::from_conf(config);
        let out = sts
            .assume_role()
            .role_arn(self.s("role_arn"))
            .role_session_name("duckgate-bench")
            .duration_seconds(3600)
            .send()
            .await
            .context("AssumeRole")?;
        let c = out
            .credentials()
            .ok_or_else(|| anyhow!("STS answered without credentials"))?;
        let conn = open_inproc(None, opts)?;
        let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
        conn.execute_batch("LOAD httpfs")?;
        conn.execute_batch(&format!(
            "CREATE OR REPLACE TEMPORARY SECRET bench_s3 (TYPE s3, PROVIDER config, \
             KEY_ID {}, SECRET {}, SESSION_TOKEN {}, REGION {}, USE_SSL false, \
             ENDPOINT {}, URL_STYLE 'path', SCOPE 's3://duckgate-test/')",
            q(c.access_key_id()),
            q(c.secret_access_key()),
            q(c.session_token()),
            q(&self.s("region")),
            q(&self.s("endpoint")),
        ))?;
        Ok(conn)
    }
}

impl Drop for S3Emulation {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn s3_scan_sql() -> String {
    format!(
        "SELECT count(*) AS n, sum(id) AS ids, sum(v) AS vs, sum(length(s)) AS chars \
         FROM read_parquet('{S3_URL}')"
    )
}

async fn bench_s3(opts: &Opts, emu: &S3Emulation, table: &mut Table) -> Result<()> {
    let name = format!(
        "S3: scan {}-row Parquet (cold, first scan)",
        human_rows(opts.s3_rows)
    );
    let warm_name = format!(
        "S3: scan {}-row Parquet (warm, repeated)",
        human_rows(opts.s3_rows)
    );
    let r: Result<()> = async {
        let sql = s3_scan_sql();
        let mut gw_cold = Vec::new();
        let mut ip_cold = Vec::new();
        let mut gw_warm = Vec::new();
        let mut ip_warm = Vec::new();
        let reps = opts.reps.max(1);
        for rep in 0..reps {
            // A fresh gateway and a fresh in-process database per repetition:
            // the first scan of each is cold.
            let g = Gateway::start(opts, &format!("s3-{rep}"), &emu.gateway_env(opts))?;
            let conn = emu.inproc_connection(opts).await?;
            for i in 0..2 {
                let t0 = Instant::now();
                let v = query_json(&g, &sql).await?;
                let gs = t0.elapsed().as_secs_f64();
                let t0 = Instant::now();
                let n: i64 = conn.query_row(&sql, [], |r| r.get(0))?;
                let is = t0.elapsed().as_secs_f64();
                if v["rows"][0][0].as_i64() != Some(n) || n as u64 != opts.s3_rows {
                    bail!(
                        "row counts differ: gateway {} in-process {n}",
                        v["rows"][0][0]
                    );
                }
                log(format!(
                    "S3 rep {rep} scan {i}: gateway {gs:.2} s, in-process {is:.2} s"
                ));
                if i == 0 {
                    gw_cold.push(gs);
                    ip_cold.push(is);
                } else {
                    gw_warm.push(gs);
                    ip_warm.push(is);
                }
            }
        }
        for (label, gw, ip) in [(&name, gw_cold, ip_cold), (&warm_name, gw_warm, ip_warm)] {
            let (gs, is) = (median(gw), median(ip));
            let ratio = is / gs;
            table.add(
                "5",
                label.clone(),
                format!("{gs:.2} s"),
                format!("{is:.2} s (same AssumeRole credentials)"),
                format!("{ratio:.2}"),
                "≥ 0.95",
                Some(ratio >= 0.95),
            );
        }
        Ok(())
    }
    .await;
    if let Err(e) = r {
        table.failed("5", name, &e);
    }
    Ok(())
}

// ---------------------------------------------------------------- 8. DuckLake

/// The scan of the DuckLake benchmark, over every column.
const LAKE_SCAN: &str = "SELECT count(*) AS n, sum(id) AS ids, sum(v) AS vs, \
                         sum(length(s)) AS chars FROM lake.main.events";

/// A DuckLake scan through the gateway against the same scan in-process: a
/// lake whose metadata is in a DuckDB file and whose data files are on the
/// S3 emulation, written here, read by a gateway that attaches it read-only
/// (`[[attach]]`) and by an in-process DuckDB attached to a copy of the
/// metadata file (one file, one process) with the same role's credentials.
/// Warm scans (the first of each side is left out), alternating sides.
async fn bench_lake(opts: &Opts, emu: &S3Emulation, table: &mut Table) -> Result<()> {
    let rows = opts.s3_rows;
    let name = format!("DuckLake: scan {}-row table on S3 (warm)", human_rows(rows));
    let r: Result<()> = async {
        let dir = opts.work.join("lake");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let meta = dir.join("meta.ducklake");
        let data = "s3://duckgate-test/lake/";
        let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
        let started = Instant::now();
        {
            let conn = emu.inproc_connection(opts).await?;
            conn.execute_batch(&format!(
                "LOAD ducklake; \
                 ATTACH {} AS lake (DATA_PATH {}); \
                 CREATE TABLE lake.events AS SELECT range AS id, range * 0.5 AS v, \
                 'row-' || range AS s FROM range({rows}); \
                 DETACH lake",
                q(&format!("ducklake:{}", meta.display())),
                q(data)
            ))?;
        }
        log(format!(
            "DuckLake of {} rows written in {:.1} s",
            human_rows(rows),
            started.elapsed().as_secs_f64()
        ));
        let copy = dir.join("meta-inproc.ducklake");
        std::fs::copy(&meta, &copy)?;
        let config = dir.join("duckgate.toml");
        std::fs::write(
            &config,
            format!(
                "[[attach]]\nname = \"lake\"\ntype = \"ducklake\"\npath = \"ducklake:{}\"\n\
                 data_path = \"{data}\"\n",
                meta.display()
            ),
        )?;
        let mut env = emu.gateway_env(opts);
        env.push(("DUCKGATE_CONFIG", config.display().to_string()));
        let g = Gateway::start(opts, "lake", &env)?;
        let conn = emu.inproc_connection(opts).await?;
        conn.execute_batch(&format!(
            "LOAD ducklake; ATTACH {} AS lake (READ_ONLY)",
            q(&format!("ducklake:{}", copy.display()))
        ))?;
        let reps = if opts.quick { 6 } else { 16 };
        let (mut gw, mut ip) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            let t0 = Instant::now();
            let v = query_json(&g, LAKE_SCAN).await?;
            let gs = t0.elapsed().as_secs_f64();
            let t0 = Instant::now();
            let n: i64 = conn.query_row(LAKE_SCAN, [], |r| r.get(0))?;
            let is = t0.elapsed().as_secs_f64();
            if v["rows"][0][0].as_i64() != Some(n) || n as u64 != rows {
                bail!(
                    "row counts differ: gateway {} in-process {n}",
                    v["rows"][0][0]
                );
            }
            if rep > 0 {
                gw.push(gs);
                ip.push(is);
            }
        }
        let (gs, is) = (median(gw), median(ip));
        let ratio = is / gs;
        table.add(
            "8",
            name.clone(),
            ms(gs * 1000.0),
            format!("{} (same role, metadata file copied)", ms(is * 1000.0)),
            format!("{ratio:.2}"),
            "≥ 0.95",
            Some(ratio >= 0.95),
        );
        Ok(())
    }
    .await;
    if let Err(e) = r {
        table.failed("8", name, &e);
    }
    Ok(())
}

fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn bench_rotation(opts: &Opts, emu: &S3Emulation, table: &mut Table) -> Result<()> {
    let one = "rotation: one rotation (STS AssumeRole + CREATE SECRET)".to_string();
    let cost = format!(
        "rotation: SELECT 42 p99, {} clients, rotation every second vs none",
        opts.clients
    );
    let g = match Gateway::start(opts, "rotation", &emu.gateway_env(opts)) {
        Ok(g) => g,
        Err(e) => {
            table.failed("6", one, &e);
            table.failed("6", cost, &e);
            return Ok(());
        }
    };
    let rotate = |g: &Gateway| {
        g.client
            .post(g.url("/admin/secrets/rotate"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
    };
    let r: Result<()> = async {
        let metrics = |g: &Gateway| g.client.get(g.url("/metrics")).send();
        let before = metrics(&g).await?.text().await?;
        // The CPU a rotation costs, the gateway's and the emulation's (its
        // STS answers; a real STS is another machine's): under the load of
        // the row below, on two cores, that CPU is what the queries share.
        let (gw_cpu0, emu_cpu0) = (cpu_secs(g.pid())?, cpu_secs(emu.child.id())?);
        let mut rtt = Vec::new();
        for _ in 0..opts.rotations {
            let t0 = Instant::now();
            let r = rotate(&g).await?;
            let status = r.status();
            let v: Value = r.json().await?;
            if !status.is_success() || v["errors"].as_array().is_some_and(|e| !e.is_empty()) {
                bail!("rotation failed: {status} {v}");
            }
            rtt.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        let (gw_cpu, emu_cpu) = (
            cpu_secs(g.pid())? - gw_cpu0,
            cpu_secs(emu.child.id())? - emu_cpu0,
        );
        let after = metrics(&g).await?.text().await?;
        let h = "duckgate_rotation_duration_seconds";
        let sum = metric_value(&after, &format!("{h}_sum")).unwrap_or(f64::NAN)
            - metric_value(&before, &format!("{h}_sum")).unwrap_or(0.0);
        let count = metric_value(&after, &format!("{h}_count")).unwrap_or(f64::NAN)
            - metric_value(&before, &format!("{h}_count")).unwrap_or(0.0);
        rtt.sort_by(|a, b| a.total_cmp(b));
        table.add(
            "6",
            one.clone(),
            format!(
                "admin round trip p50 {}, max {}; {h} mean {} ({count:.0} rotations); \
                 CPU a rotation: gateway {}, STS emulation {}",
                ms(percentile(&rtt, 0.5)),
                ms(*rtt.last().unwrap_or(&f64::NAN)),
                ms(sum / count * 1000.0),
                ms(gw_cpu / rtt.len().max(1) as f64 * 1000.0),
                ms(emu_cpu / rtt.len().max(1) as f64 * 1000.0)
            ),
            "—",
            "—",
            "(reported)",
            None,
        );
        Ok(())
    }
    .await;
    if let Err(e) = r {
        table.failed("6", one, &e);
    }

    let r: Result<()> = async {
        let body = query_body("SELECT 42", "json", 1000);
        let url = g.url("/query");
        wrk(opts, &url, &body, opts.clients, 1)?;
        let mut none = Vec::new();
        let mut with = Vec::new();
        let mut rotations = 0usize;
        for _ in 0..opts.rotation_pairs {
            let quiet = wrk(opts, &url, &body, opts.clients, opts.rotation_secs)?;
            let stop = Arc::new(AtomicBool::new(false));
            let rotator = {
                let (stop, client, url) = (
                    stop.clone(),
                    g.client.clone(),
                    g.url("/admin/secrets/rotate"),
                );
                let limit = opts.rotation_secs + 5;
                tokio::spawn(async move {
                    let mut n = 0usize;
                    let mut tick = tokio::time::interval(Duration::from_secs(1));
                    for _ in 0..limit {
                        tick.tick().await;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        if let Ok(r) = client.post(&url).bearer_auth(ADMIN_TOKEN).send().await {
                            if r.status().is_success() {
                                n += 1;
                            }
                        }
                    }
                    n
                })
            };
            let (o, u, b, c, s) = (
                opts.clone(),
                url.clone(),
                body.clone(),
                opts.clients,
                opts.rotation_secs,
            );
            let busy = tokio::task::spawn_blocking(move || wrk(&o, &u, &b, c, s)).await??;
            stop.store(true, Ordering::Relaxed);
            rotations += rotator.await?;
            if quiet.failures + busy.failures > 0 {
                bail!("{} requests failed", quiet.failures + busy.failures);
            }
            log(format!(
                "rotation pair: p99 none {:.3} ms, with {:.3} ms",
                quiet.p99_ms, busy.p99_ms
            ));
            none.push(quiet);
            with.push(busy);
        }
        let p99_none = median(none.iter().map(|l| l.p99_ms).collect());
        let p99_with = median(with.iter().map(|l| l.p99_ms).collect());
        let qps_none = median(none.iter().map(|l| l.qps).collect());
        let qps_with = median(with.iter().map(|l| l.qps).collect());
        let extra = (p99_with / p99_none - 1.0) * 100.0;
        table.add(
            "6",
            cost.clone(),
            format!(
                "p99 {} with {rotations} rotations ({qps_with:.0} q/s)",
                ms(p99_with)
            ),
            format!(
                "same gateway, no rotation: p99 {} ({qps_none:.0} q/s)",
                ms(p99_none)
            ),
            format!("{extra:+.1}%"),
            "< 5%",
            Some(extra < 5.0),
        );
        Ok(())
    }
    .await;
    if let Err(e) = r {
        table.failed("6", cost, &e);
    }
    Ok(())
}

// ---------------------------------------------------------------- main

fn main() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some("--floor-server") {
        return floor_server();
    }
    if std::env::args().nth(1).as_deref() == Some("--sql-server") {
        return sql_server();
    }
    let opts = Opts::parse()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(opts))
}

async fn run(opts: Opts) -> Result<()> {
    let started = Instant::now();
    log(format!(
        "mode {}, {} clients/pool connections, DuckDB threads {}, work dir {}",
        if opts.quick { "quick" } else { "full" },
        opts.clients,
        opts.threads,
        opts.work.display()
    ));
    let mut table = Table::default();
    if opts.wants("small")
        || opts.wants("cpu")
        || opts.wants("large")
        || opts.wants("statements")
        || opts.wants("flight")
    {
        prepare_data(&opts)?;
    }
    if opts.wants("small") {
        bench_small(&opts, &mut table)?;
    }
    if opts.wants("cpu") {
        if let Err(e) = bench_cpu(&opts, &mut table) {
            table.failed("11", "CPU per request", &e);
        }
    }
    if opts.wants("guard") {
        if let Err(e) = bench_guard(&opts, &mut table) {
            table.failed("9", "guard", &e);
        }
    }
    if opts.wants("large") {
        if let Err(e) = bench_large(&opts, &mut table).await {
            table.failed("2", "large results", &e);
        }
    }
    if opts.wants("statements") {
        if let Err(e) = bench_statements(&opts, &mut table).await {
            table.failed("7", "statements", &e);
        }
    }
    if opts.wants("flight") {
        if let Err(e) = bench_flight(&opts, &mut table).await {
            table.failed("10", "flight", &e);
        }
    }
    if opts.wants("memory") {
        bench_memory(&opts, &mut table).await?;
    }
    if opts.wants("health") {
        bench_health(&opts, &mut table).await?;
    }
    if opts.wants("s3") || opts.wants("rotation") || opts.wants("lake") {
        let rows = if opts.wants("s3") { opts.s3_rows } else { 1000 };
        log(format!(
            "starting the S3/STS emulation, seeding {rows} rows"
        ));
        match S3Emulation::start(&opts, rows) {
            Ok(emu) => {
                if opts.wants("s3") {
                    bench_s3(&opts, &emu, &mut table).await?;
                }
                if opts.wants("rotation") {
                    bench_rotation(&opts, &emu, &mut table).await?;
                }
                if opts.wants("lake") {
                    bench_lake(&opts, &emu, &mut table).await?;
                }
            }
            Err(e) => {
                if opts.wants("s3") {
                    table.failed("5", "S3 scan", &e);
                }
                if opts.wants("rotation") {
                    table.failed("6", "rotation", &e);
                }
                if opts.wants("lake") {
                    table.failed("8", "DuckLake scan", &e);
                }
            }
        }
    }
    let md = table.markdown();
    println!(
        "duckgate benchmarks ({} mode): {} concurrent clients = pool connections = in-process \
         connections; DuckDB threads = {} on both sides; ratio = gateway rate / in-process rate \
         (time: in-process / gateway), so 1.0 means no overhead.\n",
        if opts.quick { "quick" } else { "full" },
        opts.clients,
        opts.threads
    );
    print!("{md}");
    let failed = table
        .rows
        .iter()
        .filter(|r| r.gateway.starts_with("FAILED"))
        .count();
    log(format!(
        "done in {:.0} s; {} rows, {failed} failed",
        started.elapsed().as_secs_f64(),
        table.rows.len()
    ));
    if opts.only.is_none() {
        let _ = std::fs::remove_file(opts.db_path());
        let _ = std::fs::remove_file(opts.inproc_db_path());
    }
    if failed > 0 {
        bail!("{failed} benchmark(s) failed");
    }
    Ok(())
}
