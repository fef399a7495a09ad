//! The browser console (`/ui`) driven in a real headless Chromium against
//! the real binary, through chromedriver's WebDriver HTTP API (spoken here
//! with reqwest): enter a token, run a query and compare the table's cells
//! with DuckDB in-process, watch a long query's progress and cancel it,
//! see a bad query's problem, download a result and compare it with
//! `/query`'s answer, chart, and check that the page asked nothing of any
//! origin but the gateway; then the working day (`the_console_for_a_working_day`):
//! the catalog panel against `GET /catalog`, autocompletion against
//! `/catalog` and `/catalog/functions`, result tabs, the cell viewer, the
//! chart's axes and tooltip, the spinner where DuckDB has no estimate, and
//! the history per token across sessions. Screenshots go to the build's
//! scratch directory (`CARGO_TARGET_TMPDIR/screenshots`), or to
//! `docs/screenshots/` with `DUCKGATE_SCREENSHOTS=docs`: a test run leaves
//! the tree as it found it.
//!
//! `scripts/test-env` installs Debian's `chromium` and `chromium-driver`
//! where it may; where neither is found the browser test prints why and
//! passes (the HTTP checks of the console's headers still run).

use crate::common;
use crate::core::whoami::{now, LocalIssuer};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

const TOKEN: &str = "ui-test-token-9f3c";

/// Column names and DuckDB types.
type Head = Vec<(String, String)>;
/// DuckDB's rows, each value as its VARCHAR cast (`None`: NULL).
type Reference = Vec<Vec<Option<String>>>;
/// Rows on the page: index, cell texts, which cells show the NULL marker.
type Rendered = Vec<(u64, Vec<String>, Vec<bool>)>;

/// A chromedriver process and one browser session.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    /// The browser's profile, removed with the browser.
    _profile: tempfile::TempDir,
}

/// The window and locale a browser starts with.
#[derive(Clone, Copy)]
struct Window {
    width: u32,
    height: u32,
    /// A BCP 47 locale: the page's language and `Intl`'s default.
    locale: &'static str,
}

const DEFAULT_WINDOW: Window = Window {
    width: 1440,
    height: 900,
    locale: "en-US",
};

impl Drop for Browser {
    // Chromium is chromedriver's child (with helpers of its own): ending the
    // session ends it, and whatever is left of the process tree is killed,
    // so no test (a failing one included) leaves a browser behind.
    fn drop(&mut self) {
        let tree = self.processes();
        self.quit_session();
        // chromedriver leads its own process group (see `start`).
        let pgid = self.driver.id() as libc::pid_t;
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        for pid in tree.into_iter().chain(self.processes()) {
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// The parent of process `pid` and whether it has ended (a zombie), from /proc.
fn proc_stat(pid: u32) -> Option<(u32, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state == "Z" || state == "X"))
}

/// Whether process `pid` still runs (an unreaped zombie does not).
fn alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(_, dead)| !dead)
}

fn find_binary(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    /// Every live process under chromedriver (Chromium and its helpers).
    fn processes(&self) -> Vec<u32> {
        let mut children: std::collections::HashMap<u32, Vec<u32>> = Default::default();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some((ppid, false)) = proc_stat(pid) {
                children.entry(ppid).or_default().push(pid);
            }
        }
        let mut out = Vec::new();
        let mut todo = vec![self.driver.id()];
        while let Some(p) = todo.pop() {
            for c in children.get(&p).into_iter().flatten() {
                out.push(*c);
                todo.push(*c);
            }
        }
        out
    }

    /// Ends the WebDriver session (chromedriver then closes Chromium) with
    /// a plain blocking request: `Drop` cannot await.
    fn quit_session(&self) {
        use std::io::{Read as _, Write as _};
        if self.session.is_empty() {
            return;
        }
        let Some(addr) = self.base.strip_prefix("http://") else {
            return;
        };
        let Ok(mut sock) = std::net::TcpStream::connect(addr) else {
            return;
        };
        let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = sock.set_write_timeout(Some(Duration::from_secs(10)));
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.session
        );
        if sock.write_all(request.as_bytes()).is_ok() {
            let mut answer = Vec::new();
            let _ = sock.read_to_end(&mut answer);
        }
    }

    /// Starts chromedriver and a headless Chromium that saves downloads in
    /// `downloads`; `None` (with the reason printed) when there is none.
    async fn start(downloads: &Path) -> Option<Browser> {
        Self::start_with(downloads, DEFAULT_WINDOW).await
    }

    /// As [`Browser::start`], with the window's size and the locale.
    async fn start_with(downloads: &Path, window: Window) -> Option<Browser> {
        let chromium = find_binary("DUCKGATE_CHROMIUM", &["chromium", "chromium-browser"]);
        let driver = find_binary("DUCKGATE_CHROMEDRIVER", &["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            eprintln!(
                "SKIPPED tests/ui.rs browser checks: no chromium and chromedriver on PATH \
                 (scripts/test-env installs Debian's chromium and chromium-driver as root; \
                 or set DUCKGATE_CHROMIUM and DUCKGATE_CHROMEDRIVER to their paths)"
            );
            return None;
        };
        let port = free_port();
        // Its own process group, which Chromium joins: `Drop` kills the group.
        let child = std::os::unix::process::CommandExt::process_group(
            Command::new(&driver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            0,
        )
        .spawn()
        .expect("start chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let mut b = Browser {
            driver: child,
            base,
            session: String::new(),
            http,
            _profile: profile,
        };
        common::eventually("chromedriver is ready", Duration::from_secs(30), || {
            let http = b.http.clone();
            let url = format!("{}/status", b.base);
            async move {
                match http.get(url).send().await {
                    Ok(r) if r.status() == 200 => Ok(()),
                    Ok(r) => Err(format!("status {}", r.status())),
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await;
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"performance": "ALL", "browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage",
                    format!("--window-size={},{}", window.width, window.height),
                    format!("--lang={}", window.locale),
                    format!("--user-data-dir={}", b._profile.path().display()),
                    "--force-device-scale-factor=1",
                    // Every name resolves to nothing: the page can reach
                    // the gateway (an IP address) and no other host.
                    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                ],
                "prefs": {
                    "download.default_directory": downloads,
                    "download.prompt_for_download": false,
                    "intl.accept_languages": window.locale,
                },
            },
        }}});
        let r: Value = b
            .http
            .post(format!("{}/session", b.base))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .unwrap();
        b.session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"))
            .to_string();
        // Downloads in headless Chromium: allowed into `downloads`.
        let _ = b
            .cmd(
                "POST",
                "/goog/cdp/execute",
                json!({"cmd": "Browser.setDownloadBehavior",
                       "params": {"behavior": "allow", "downloadPath": downloads}}),
            )
            .await;
        // `Intl`'s default locale (headless Chromium keeps en-US whatever
        // --lang says); it holds across navigations.
        b.cmd(
            "POST",
            "/goog/cdp/execute",
            json!({"cmd": "Emulation.setLocaleOverride", "params": {"locale": window.locale}}),
        )
        .await
        .expect("the locale override");
        Some(b)
    }

    async fn cmd(&self, method: &str, path: &str, body: Value) -> Result<Value, String> {
        let url = format!("{}/session/{}{}", self.base, self.session, path);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body),
        };
        let r = req.send().await.map_err(|e| e.to_string())?;
        let status = r.status();
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(v["value"].clone())
        } else {
            Err(format!("{method} {path}: {status} {v}"))
        }
    }

    async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", json!({ "url": url }))
            .await
            .unwrap();
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    async fn js(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
        .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    async fn element(&self, css: &str) -> String {
        let v = self
            .cmd(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        v["element-6066-11e4-a52e-4f735466cecf"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Clicks the element `css` finds. The console may render it again
    /// between the find and the click (a result's grid does as its rows
    /// arrive): a stale element is found again, a few times at most.
    async fn click(&self, css: &str) {
        for attempt in 1.. {
            let id = self.element(css).await;
            match self
                .cmd("POST", &format!("/element/{id}/click"), json!({}))
                .await
            {
                Ok(_) => return,
                Err(e) if attempt < 5 && e.contains("stale element reference") => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("click {css}: {e}"),
            }
        }
    }

    /// Types `text` into the element (WebDriver key codes allowed).
    async fn keys(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        )
        .await
        .unwrap_or_else(|e| panic!("keys {css}: {e}"));
    }

    /// Waits until `script` returns something truthy; returns it.
    async fn wait_for(&self, what: &str, script: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let v = self.js(script, json!([])).await;
            let truthy = !(v.is_null() || v == json!(false) || v == json!("") || v == json!(0));
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let status = self
                    .js("return document.getElementById('status').textContent + ' | ' + document.getElementById('problem').textContent", json!([]))
                    .await;
                panic!("{what}: not within {within:?} (page status: {status})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&self, name: &str) {
        let v = self.cmd("GET", "/screenshot", json!({})).await.unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap();
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Log entries of `kind` (`performance`: DevTools events; `browser`:
    /// the console, CSP violations included) since the last call.
    async fn log(&self, kind: &str) -> Vec<Value> {
        self.cmd("POST", "/se/log", json!({ "type": kind }))
            .await
            .map(|v| v.as_array().cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Puts `sql` in the editor as typed text would.
    async fn set_sql(&self, sql: &str) {
        self.js(
            "const t = document.getElementById('sql'); t.value = arguments[0]; \
             t.dispatchEvent(new Event('input')); t.focus();",
            json!([sql]),
        )
        .await;
    }

    /// Runs the editor's SQL with the Run button and waits for an end state.
    async fn run(&self, sql: &str) -> String {
        self.set_sql(sql).await;
        self.click("#run").await;
        self.wait_end().await
    }

    async fn wait_end(&self) -> String {
        let s = self
            .wait_for(
                "the statement ends",
                "const s = document.getElementById('status').dataset.state; \
                 return ['succeeded','failed','cancelled'].includes(s) ? s : null",
                Duration::from_secs(120),
            )
            .await;
        let s = s.as_str().unwrap().to_string();
        if s == "succeeded" {
            // And its result is paged in.
            self.wait_for(
                "the result is loaded",
                "return document.getElementById('table-pane').dataset.loaded",
                Duration::from_secs(120),
            )
            .await;
        }
        s
    }

    /// The header (name, type) and the rendered rows: (row index, cells as
    /// DuckDB printed them, which cells show NULL). A number's cell shows
    /// its digits grouped and keeps DuckDB's text in `data-raw`, which is
    /// what this reads ([`Browser::shown_table`] reads what is shown).
    async fn table(&self) -> (Head, Rendered) {
        self.table_text("c.dataset.raw ?? c.textContent").await
    }

    /// As [`Browser::table`], with each cell's text as shown.
    async fn shown_table(&self) -> (Head, Rendered) {
        self.table_text("c.textContent").await
    }

    async fn table_text(&self, cell: &str) -> (Head, Rendered) {
        let v = self
            .js(
                &format!("const head = [...document.querySelectorAll('.grid-head .cell')].slice(1)
                   .map(h => [h.querySelector('.col-name').textContent, h.querySelector('.col-type').textContent]);
                 const rows = [...document.querySelectorAll('.grid-row')].map(r => {{
                   const cells = [...r.querySelectorAll('.cell')].slice(1);
                   return [Number(r.dataset.row), cells.map(c => {cell}), cells.map(c => c.classList.contains('cell-null'))];
                 }});
                 return [head, rows];"),
                json!([]),
            )
            .await;
        let head = v[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h[0].as_str().unwrap().to_string(),
                    h[1].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let rows = v[1]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r[0].as_u64().unwrap(),
                    r[1].as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c.as_str().unwrap().to_string())
                        .collect(),
                    r[2].as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c.as_bool().unwrap())
                        .collect(),
                )
            })
            .collect();
        (head, rows)
    }
}

/// DuckDB in-process: the column names and types of `sql`, and each value
/// as DuckDB prints it (its VARCHAR cast), `None` for NULL.
fn duckdb_reference(sql: &str) -> (Head, Reference) {
    duckdb_reference_on(&duckdb::Connection::open_in_memory().unwrap(), sql)
}

/// [`duckdb_reference`] on `conn` (which holds the tables `sql` reads).
fn duckdb_reference_on(conn: &duckdb::Connection, sql: &str) -> (Head, Reference) {
    let mut stmt = conn.prepare(&format!("DESCRIBE {sql}")).unwrap();
    let head: Head = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let casts = (1..=head.len())
        .map(|i| format!("CAST(#{i} AS VARCHAR)"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut stmt = conn
        .prepare(&format!("SELECT {casts} FROM ({sql})"))
        .unwrap();
    let n = head.len();
    let rows = stmt
        .query_map([], |r| {
            (0..n)
                .map(|i| r.get::<_, Option<String>>(i))
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    (head, rows)
}

/// Waits for Chromium to finish the download that ends in `ext`.
async fn downloaded(dir: &Path, ext: &str) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        if let Some(p) = done.first() {
            let bytes = std::fs::read(p).unwrap();
            std::fs::remove_file(p).unwrap();
            return bytes;
        }
        assert!(
            Instant::now() < deadline,
            "no .{ext} download in {}",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn query_bytes(g: &common::Gateway, sql: &str, format: &str) -> Vec<u8> {
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(TOKEN)
        .json(&json!({ "sql": sql, "format": format }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap().to_vec()
}

const TYPED_SQL: &str = "SELECT i AS id, 'name ' || i AS label, \
    CASE WHEN i % 3 = 0 THEN NULL ELSE i / 4 END AS score, \
    CASE WHEN i = 2 THEN 'NULL' WHEN i % 4 = 0 THEN NULL ELSE 'x' || i END AS note, \
    (DATE '2024-01-30' + i::INTEGER) AS day, i % 2 = 0 AS even, \
    (i * 1.25)::DECIMAL(9,2) AS amount \
    FROM range(1, 41) t(i) ORDER BY i";

/// Compares the rendered rows with DuckDB's; answers how many it compared.
fn compare_rows(reference: &Reference, rows: &Rendered) -> usize {
    for (i, cells, nulls) in rows {
        let want = &reference[*i as usize];
        assert_eq!(cells.len(), want.len(), "row {i}");
        for (c, w) in want.iter().enumerate() {
            match w {
                None => assert!(
                    nulls[c],
                    "row {i} col {c}: DuckDB has NULL, the page shows {:?}",
                    cells[c]
                ),
                Some(w) => {
                    assert!(
                        !nulls[c],
                        "row {i} col {c}: DuckDB has {w:?}, the page shows a NULL"
                    );
                    assert_eq!(&cells[c], w, "row {i} col {c}");
                }
            }
        }
    }
    rows.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier browser: needs chromium and chromedriver; scripts/test installs it"]
async fn the_console_in_a_real_browser() {
    let downloads = tempfile::tempdir().unwrap();
    let Some(b) = Browser::start(downloads.path()).await else {
        return;
    };
    let g = a_gateway_with_a_table_to_scan().await;
    the_console_asks_for_a_token_and_keeps_it_out_of_the_url(&b, &g).await;
    a_querys_cells_equal_duckdbs(&b).await;
    each_download_is_the_querys_answer(&b, &g, &downloads).await;
    a_hundred_thousand_rows_page_in_with_a_small_dom(&b).await;
    a_chart_is_drawn(&b).await;
    let bad = a_bad_query_shows_its_problem_at_duckdbs_place(&b, &g).await;
    a_long_error_shows_its_first_line_and_folds_the_rest(&b, &g).await;
    a_long_query_shows_progress_and_cancel_stops_it(&b, &g).await;
    a_shared_link_runs_and_the_history_lists_what_ran(&b, &g, bad).await;
    the_api_docs_render(&b, &g).await;
    nothing_but_the_gateway_was_asked_and_nothing_threw(&b, &g).await;
    let _ = b.cmd("DELETE", "", json!({})).await;
}

/// A gateway holding `big`, a table DuckDB reports scan progress for.
async fn a_gateway_with_a_table_to_scan() -> common::Gateway {
    let g = common::Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_POOL_SIZE", 2)
        .start();
    // A table DuckDB reports scan progress for (as tests/statements.rs).
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(TOKEN)
        .json(&json!({"sql": "CREATE TABLE big AS SELECT range AS i FROM range(60000000)", "timeout_ms": 120_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    g
}

/// `/` leads to the console, which asks for a token first.
async fn the_console_asks_for_a_token_and_keeps_it_out_of_the_url(
    b: &Browser,
    g: &common::Gateway,
) {
    b.goto(&g.url("/")).await;
    let url = b.js("return location.pathname", json!([])).await;
    assert_eq!(url, "/ui");
    b.wait_for(
        "the token dialog",
        "return document.getElementById('login').open",
        Duration::from_secs(20),
    )
    .await;
    // A wrong token is refused at once.
    b.keys("#token", "not-the-token").await;
    b.click("#connect").await;
    let msg = b
        .wait_for(
            "the refusal",
            "const e = document.getElementById('login-error'); return !e.hidden && e.textContent",
            Duration::from_secs(20),
        )
        .await;
    assert!(!msg.as_str().unwrap().contains("not-the-token"), "{msg}");
    b.keys("#token", TOKEN).await;
    b.click("#connect").await;
    b.wait_for(
        "the dialog closes",
        "return !document.getElementById('login').open",
        Duration::from_secs(20),
    )
    .await;
    // The token lives in the tab's session storage, not in the URL.
    let stored = b
        .js(
            "return [sessionStorage.getItem('duckgate.token'), location.href]",
            json!([]),
        )
        .await;
    assert_eq!(stored[0], TOKEN);
    assert!(!stored[1].as_str().unwrap().contains(TOKEN));
    // The catalog panel lists the table made above.
    b.wait_for(
        "the catalog shows table big",
        "return [...document.querySelectorAll('#catalog summary')].some(s => s.textContent.trim() === 'big')",
        Duration::from_secs(30),
    )
    .await;
}

/// A query run with Ctrl+Enter; the table's cells equal DuckDB's.
async fn a_querys_cells_equal_duckdbs(b: &Browser) {
    b.set_sql(TYPED_SQL).await;
    b.keys("#sql", "\u{E009}\u{E007}\u{E000}").await;
    assert_eq!(b.wait_end().await, "succeeded");
    let stmt = b
        .js(
            "return document.getElementById('stmt-id').textContent",
            json!([]),
        )
        .await;
    assert!(stmt.as_str().unwrap().starts_with("statement "), "{stmt}");
    let (want_head, want_rows) = duckdb_reference(TYPED_SQL);
    let (head, rows) = b.table().await;
    assert_eq!(head, want_head, "names and DuckDB types in the header");
    let mut compared = compare_rows(&want_rows, &rows);
    b.screenshot("result-table").await;
    // Scroll to the end: the last rows render and equal DuckDB's too.
    b.js(
        "const v = document.querySelector('.grid-viewport'); v.scrollTop = v.scrollHeight;",
        json!([]),
    )
    .await;
    b.wait_for(
        "the last row renders",
        &format!(
            "return !!document.querySelector('.grid-row[data-row=\"{}\"]')",
            want_rows.len() - 1
        ),
        Duration::from_secs(10),
    )
    .await;
    compared += compare_rows(&want_rows, &b.table().await.1);
    assert!(compared >= want_rows.len(), "compared {compared} rows");
    // The string 'NULL' (row 2) and a NULL (row 4) look different: the
    // comparisons above checked the marker class both ways; the reference
    // must hold both for that to mean anything.
    assert_eq!(want_rows[1][3].as_deref(), Some("NULL"));
    assert_eq!(want_rows[3][3], None);
}

/// Downloads: each format fetched with the token and saved; the file
/// equals /query's answer (JSON but its elapsed_ms; Parquet as DuckDB
/// reads it back: the same columns, types and values as the query).
async fn each_download_is_the_querys_answer(
    b: &Browser,
    g: &common::Gateway,
    downloads: &tempfile::TempDir,
) {
    for (format, ext) in [
        ("csv", "csv"),
        ("ndjson", "ndjson"),
        ("arrow", "arrow"),
        ("json", "json"),
        ("parquet", "parquet"),
    ] {
        b.click(&format!("#downloads button[data-format=\"{format}\"]"))
            .await;
        let got = downloaded(downloads.path(), ext).await;
        if format == "parquet" {
            let file = downloads.path().join("read-back.parquet");
            std::fs::write(&file, &got).unwrap();
            let back =
                duckdb_reference(&format!("SELECT * FROM read_parquet('{}')", file.display()));
            assert_eq!(
                back,
                duckdb_reference(TYPED_SQL),
                "Parquet download read back"
            );
            continue;
        }
        let want = query_bytes(g, TYPED_SQL, format).await;
        if format == "json" {
            let mut a: Value = serde_json::from_slice(&got).unwrap();
            let mut w: Value = serde_json::from_slice(&want).unwrap();
            a.as_object_mut().unwrap().remove("elapsed_ms");
            w.as_object_mut().unwrap().remove("elapsed_ms");
            assert_eq!(a, w, "JSON download");
        } else {
            assert_eq!(got, want, "{format} download differs from /query's answer");
        }
    }
}

/// 100,000 rows: all paged in, a bounded number of rows in the DOM, and
/// a jump to the middle renders that row.
async fn a_hundred_thousand_rows_page_in_with_a_small_dom(b: &Browser) {
    let t = Instant::now();
    assert_eq!(
        b.run("SELECT i, i * 2 AS twice, 'row ' || i AS s FROM range(100000) t(i)")
            .await,
        "succeeded"
    );
    let load = t.elapsed();
    let loaded = b
        .js(
            "return document.getElementById('table-pane').dataset.loaded",
            json!([]),
        )
        .await;
    assert_eq!(loaded, "100000");
    let timing = b
        .js(
            "const v = document.querySelector('.grid-viewport');
             const t0 = performance.now();
             for (let k = 0; k < 50; k++) { v.scrollTop = (k * 1999 % 100000) * 24; v.dispatchEvent(new Event('scroll')); }
             v.scrollTop = 50000 * 24;
             return performance.now() - t0;",
            json!([]),
        )
        .await;
    b.wait_for(
        "row 50000 renders",
        "const r = document.querySelector('.grid-row[data-row=\"50000\"]'); return r && (c => c.dataset.raw ?? c.textContent)(r.querySelectorAll('.cell')[1]) === '50000'",
        Duration::from_secs(10),
    )
    .await;
    let dom_rows = b
        .js(
            "return document.querySelectorAll('.grid-row').length",
            json!([]),
        )
        .await;
    assert!(
        dom_rows.as_u64().unwrap() < 200,
        "virtual scrolling keeps the DOM small: {dom_rows} rows"
    );
    eprintln!(
        "100,000 rows: run and paged in {load:?}; 50 scroll jumps {timing} ms; {dom_rows} rows in the DOM"
    );
}

/// A chart of one category and two numbers.
async fn a_chart_is_drawn(b: &Browser) {
    assert_eq!(
        b.run("SELECT 'region ' || (i % 7) AS region, sum(i * (i % 7 + 1)) AS total, sum(i * (7 - i % 7)) AS other FROM range(7000) t(i) GROUP BY 1 ORDER BY 1")
            .await,
        "succeeded"
    );
    b.click(".tab[data-tab=\"chart\"]").await;
    let painted = b
        .wait_for(
            "the chart is drawn",
            "const c = document.getElementById('chart'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
             let n = 0; for (let k = 0; k < d.length; k += 4) if (d[k + 3] && (d[k] !== d[k + 1] || d[k + 1] !== d[k + 2])) n++; return n",
            Duration::from_secs(10),
        )
        .await;
    assert!(
        painted.as_u64().unwrap() > 1000,
        "coloured pixels: {painted}"
    );
    b.screenshot("chart").await;
    b.click(".tab[data-tab=\"table\"]").await;
}

/// A bad query: the problem's title and DuckDB's class, as /query says
/// them, and the place DuckDB gives marked in the SQL: the `channel` of
/// line 3 that DuckDB stopped at, not the first one.
async fn a_bad_query_shows_its_problem_at_duckdbs_place(
    b: &Browser,
    g: &common::Gateway,
) -> &'static str {
    let bad = "SELECT channel, count(*)\nFROM (SELECT 'web' AS channel)\nGROUPBY channel";
    assert_eq!(b.run(bad).await, "failed");
    let shown = b
        .js(
            "const mark = document.getElementById('sql-error-mark');
             let at = null;
             if (mark) { const r = document.createRange(); r.setStart(document.getElementById('editor-highlight'), 0); r.setEndBefore(mark); at = r.toString().length; }
             return [document.getElementById('problem-title').textContent, document.getElementById('problem-class').textContent, document.getElementById('problem-detail').textContent, mark && mark.textContent, at, (document.getElementById('problem-where') || {}).textContent, (document.getElementById('problem-excerpt') || {}).textContent]",
            json!([]),
        )
        .await;
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(TOKEN)
        .json(&json!({ "sql": bad }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let problem: Value = r.json().await.unwrap();
    assert_eq!(shown[0], problem["title"]);
    assert_eq!(
        shown[1],
        format!("{} Error", problem["error_class"].as_str().unwrap())
    );
    assert_eq!(shown[2], problem["detail"]);
    let offset = problem["offset"].as_u64().unwrap() as usize;
    assert_eq!(shown[3], "channel", "the name DuckDB stopped at is marked");
    assert_eq!(
        shown[4].as_u64(),
        Some(bad[..offset].encode_utf16().count() as u64),
        "the mark stands at DuckDB's place ({problem}), not at the first `channel`"
    );
    assert_eq!(
        shown[5],
        format!("· line {}, column {}", problem["line"], problem["column"])
    );
    assert_eq!(shown[6], problem["excerpt"]);
    b.screenshot("error").await;
    bad
}

/// A long error (DuckDB's candidate functions): its first line shows,
/// the rest is folded until opened.
async fn a_long_error_shows_its_first_line_and_folds_the_rest(b: &Browser, g: &common::Gateway) {
    let long = "SELECT substr(1, 2, 3, 4, 5)";
    assert_eq!(b.run(long).await, "failed");
    let shown = b
        .js(
            "return [document.getElementById('problem-detail').textContent, document.getElementById('problem-rest').textContent, document.getElementById('problem-more').hidden, document.getElementById('problem-more').open, (document.getElementById('sql-error-mark') || {}).textContent]",
            json!([]),
        )
        .await;
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(TOKEN)
        .json(&json!({ "sql": long }))
        .send()
        .await
        .unwrap();
    let problem: Value = r.json().await.unwrap();
    let detail = problem["detail"].as_str().unwrap();
    let (first, rest) = detail
        .split_once('\n')
        .expect("a long error has more lines");
    assert_eq!(shown[0], first);
    assert_eq!(shown[1], rest.trim_start_matches('\n'));
    assert_eq!(
        (shown[2].as_bool(), shown[3].as_bool()),
        (Some(false), Some(false)),
        "folded"
    );
    assert_eq!(shown[4], "substr");
}

/// A long query: progress moves, Cancel stops it, the connection is back.
async fn a_long_query_shows_progress_and_cancel_stops_it(b: &Browser, g: &common::Gateway) {
    b.set_sql("SELECT sum(hash(i::VARCHAR || 'x')) FROM big")
        .await;
    b.click("#run").await;
    let mut seen: Vec<f64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while seen.len() < 2 {
        let text = b
            .js("return [document.getElementById('status').dataset.state, document.getElementById('progress-text').textContent]", json!([]))
            .await;
        assert!(
            ["submitting", "queued", "running"].contains(&text[0].as_str().unwrap()),
            "the scan ended ({}) before progress rose twice: {seen:?}",
            text[0]
        );
        let pct = text[1]
            .as_str()
            .unwrap()
            .split('%')
            .next()
            .and_then(|p| p.trim().parse::<f64>().ok());
        if let Some(p) = pct {
            if p > 0.0 && seen.last().is_none_or(|&l| p > l) {
                seen.push(p);
                if seen.len() == 1 {
                    b.screenshot("progress").await;
                }
            }
        }
        assert!(Instant::now() < deadline, "no rising progress on the page");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let id = b
        .js(
            "return document.getElementById('stmt-id').textContent.replace('statement ', '')",
            json!([]),
        )
        .await;
    let id = id.as_str().unwrap().to_string();
    b.click("#cancel").await;
    assert_eq!(b.wait_end().await, "cancelled");
    let (status, s) = g.get(&format!("/statements/{id}"), TOKEN).await;
    assert_eq!(status, 200);
    assert_eq!(s["state"], "cancelled", "{s}");
    g.health_until(
        "the cancelled statement's connection is back in the pool",
        |h| h["pool"]["in_use"] == 0,
        Duration::from_secs(30),
    )
    .await;
    eprintln!("progress seen on the page: {seen:?}");
}

/// A shared link opens with its SQL and runs it (the token from this tab).
async fn a_shared_link_runs_and_the_history_lists_what_ran(
    b: &Browser,
    g: &common::Gateway,
    bad: &str,
) {
    let shared = "SELECT 'shared' AS how, 7 AS n";
    let link = format!(
        "{}#sql={}",
        g.url("/ui"),
        shared
            .bytes()
            .map(|c| if c.is_ascii_alphanumeric() {
                (c as char).to_string()
            } else {
                format!("%{c:02X}")
            })
            .collect::<String>()
    );
    b.goto("about:blank").await;
    b.goto(&link).await;
    assert_eq!(b.wait_end().await, "succeeded");
    let (_, rows) = b.table().await;
    assert_eq!(rows[0].1, vec!["shared".to_string(), "7".to_string()]);
    // This tab's history lists what ran.
    let hist = b
        .js(
            "return [...document.querySelectorAll('#history li .mono')].map(e => e.textContent)",
            json!([]),
        )
        .await;
    assert!(
        hist.as_array().unwrap().iter().any(|h| h == bad),
        "history: {hist}"
    );
}

/// The API docs render from the embedded document.
async fn the_api_docs_render(b: &Browser, g: &common::Gateway) {
    b.goto(&g.url("/docs")).await;
    b.wait_for(
        "the docs render",
        "return document.querySelectorAll('section.op').length > 20 && !!document.getElementById('schema-QueryRequest')",
        Duration::from_secs(20),
    )
    .await;
    b.screenshot("docs").await;
}

/// Nothing but the gateway was asked for anything, and nothing broke
/// the CSP or threw.
async fn nothing_but_the_gateway_was_asked_and_nothing_threw(b: &Browser, g: &common::Gateway) {
    let mut urls = Vec::new();
    for e in b.log("performance").await {
        let m: Value =
            serde_json::from_str(e["message"].as_str().unwrap_or("{}")).unwrap_or_default();
        if m["message"]["method"] == "Network.requestWillBeSent" {
            urls.push(
                m["message"]["params"]["request"]["url"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
        }
    }
    assert!(
        urls.len() > 10,
        "the DevTools log saw the page's requests: {urls:?}"
    );
    // `chrome://` is the browser's own (a fresh profile's new-tab page),
    // never a network request.
    for u in urls.iter().filter(|u| !u.starts_with("chrome://")) {
        assert!(
            u.starts_with(&g.base) || u.starts_with("blob:") || u.starts_with("data:"),
            "the page asked another origin: {u}"
        );
    }
    let entries = b
        .js(
            "return performance.getEntriesByType('resource').map(e => e.name)",
            json!([]),
        )
        .await;
    for u in entries.as_array().unwrap() {
        assert!(u.as_str().unwrap().starts_with(&g.base), "{u}");
    }
    let severe: Vec<Value> = b
        .log("browser")
        .await
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        // The wrong token above is a 401 the console logs as a failed load.
        .filter(|e| !e["message"].as_str().unwrap_or("").contains("401"))
        // Its bad queries are 400s (the reason phrase is the problem's
        // title). No 404: the console polls statements, which say they
        // ended, not `/queries/{id}` (404 once a query stops), and the
        // pages link their icon.
        .filter(|e| {
            !e["message"]
                .as_str()
                .unwrap_or("")
                .contains("status of 400 (")
        })
        .collect();
    assert!(severe.is_empty(), "console errors: {severe:?}");
}

#[tokio::test]
#[ignore = "tier browser: needs chromium and chromedriver; scripts/test installs it"]
async fn the_console_has_strict_headers_and_can_be_turned_off() {
    let g = common::Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .start();
    let r = g.client.get(g.url("/ui")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    for part in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    let html = r.text().await.unwrap();
    // Every script and style the page loads is served, from this origin.
    for asset in [
        "/ui/console.js",
        "/ui/api.js",
        "/ui/editor.js",
        "/ui/complete.js",
        "/ui/sha256.js",
        "/ui/grid.js",
        "/ui/chart.js",
        "/ui/console.css",
        "/docs/docs.js",
        "/docs/docs.css",
    ] {
        let r = g.client.get(g.url(asset)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{asset}");
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    }
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no absolute URL in the page"
    );
    // `/` redirects to the console; the files hold no token.
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(g.url("/"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_redirection());
    assert_eq!(r.headers()["location"], "/ui");

    let off = common::Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .env("DUCKGATE_UI", "false")
        .start();
    for path in ["/", "/ui", "/ui/console.js"] {
        let r = off.client.get(off.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path} with DUCKGATE_UI=false");
    }
    // The API docs stay.
    let r = off.client.get(off.url("/docs")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

/// Serves `html` at `/` on a loopback port of its own: another site's page.
async fn serve_page(html: String) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let html = html.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
                    html.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

#[tokio::test]
#[ignore = "tier browser: needs chromium and chromedriver; scripts/test installs it"]
async fn no_page_writes_through_an_anonymous_gateway_unasked() {
    // Issue 36: with no tokens, a page on another localhost port wrote a
    // table (a CORS-simple POST needs no preflight), and `/ui#sql=<write>`
    // ran the write on load.
    let downloads = tempfile::tempdir().unwrap();
    let Some(b) = Browser::start(downloads.path()).await else {
        return;
    };
    let g = common::Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .start();
    another_sites_page_writes_nothing(&b, &g).await;
    a_shared_link_that_writes_asks_first(&b, &g).await;
    accepted_a_shared_write_runs(&b, &g).await;
    a_shared_read_runs_at_once(&b, &g).await;
}

/// How many tables named `name` the gateway holds.
async fn tables(g: &common::Gateway, name: &str) -> i64 {
    g.query_ok(&format!(
        "SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = '{name}'"
    ))
    .await["rows"][0][0]
        .as_i64()
        .unwrap()
}

/// The console's link that opens with `sql` in the editor.
fn shared_link(g: &common::Gateway, sql: &str) -> String {
    format!(
        "{}#sql={}",
        g.url("/ui"),
        form_urlencoded::byte_serialize(sql.as_bytes()).collect::<String>()
    )
}

/// Another site's page fires every kind of request a page may send
/// without a preflight, as a form and as fetch.
async fn another_sites_page_writes_nothing(b: &Browser, g: &common::Gateway) {
    let target = g.url("/query");
    let page = format!(
        r#"<!doctype html><form id="f" method="POST" action="{target}" enctype="text/plain">
<input name="CREATE TABLE pwned_form AS SELECT 1 AS x --" value=""></form>
<script>
fetch("{target}", {{method: "POST", mode: "no-cors", headers: {{"content-type": "text/plain"}}, body: "CREATE TABLE pwned_fetch AS SELECT 1 AS x"}})
  .finally(() => {{ document.title = "sent"; document.getElementById("f").submit(); }});
</script>"#
    );
    let port = serve_page(page).await;
    b.goto(&format!("http://127.0.0.1:{port}/")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(tables(g, "pwned_fetch").await, 0, "the page's fetch wrote");
    assert_eq!(tables(g, "pwned_form").await, 0, "the page's form wrote");
    // Control: the gateway writes what the same statement asks of it
    // directly, so the refusal above is the origin's.
    g.query_ok("CREATE TABLE direct AS SELECT 1 AS x").await;
    assert_eq!(tables(g, "direct").await, 1);
}

/// A shared link that writes asks first; declined, nothing runs.
async fn a_shared_link_that_writes_asks_first(b: &Browser, g: &common::Gateway) {
    b.goto(&shared_link(
        g,
        "CREATE TABLE shared_write AS SELECT 1 AS x",
    ))
    .await;
    b.wait_for(
        "the token dialog",
        "return document.getElementById('login').open",
        Duration::from_secs(20),
    )
    .await;
    b.click("#connect").await;
    let kind = b
        .wait_for(
            "the confirmation",
            "const d = document.getElementById('confirm-write'); return d.open && document.getElementById('confirm-write-kind').textContent",
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(kind, "CREATE TABLE");
    assert_eq!(
        tables(g, "shared_write").await,
        0,
        "it ran before the answer"
    );
    b.click("#confirm-write-cancel").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(tables(g, "shared_write").await, 0, "declined, it ran");
}

/// Accepted, a shared write runs.
async fn accepted_a_shared_write_runs(b: &Browser, g: &common::Gateway) {
    b.goto("about:blank").await;
    b.goto(&shared_link(
        g,
        "CREATE TABLE shared_write AS SELECT 1 AS x",
    ))
    .await;
    b.wait_for(
        "the confirmation again",
        "return document.getElementById('confirm-write').open",
        Duration::from_secs(20),
    )
    .await;
    b.click("#confirm-write-run").await;
    assert_eq!(b.wait_end().await, "succeeded");
    assert_eq!(tables(g, "shared_write").await, 1);
}

/// A shared read runs at once, no question asked.
async fn a_shared_read_runs_at_once(b: &Browser, g: &common::Gateway) {
    b.goto("about:blank").await;
    b.goto(&shared_link(g, "SELECT 42 AS answer")).await;
    assert_eq!(b.wait_end().await, "succeeded");
    let open = b
        .js(
            "return document.getElementById('confirm-write').open",
            json!([]),
        )
        .await;
    assert_eq!(open, json!(false));
}

const SECOND_TOKEN: &str = "ui-second-token-77aa";

/// POST /query with `token`, expecting 200: the JSON answer.
async fn query_as(g: &common::Gateway, token: &str, sql: &str) -> Value {
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(token)
        .json(&json!({ "sql": sql }))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{sql}: {text}");
    serde_json::from_str(&text).unwrap()
}

impl Browser {
    /// Runs `script` asynchronously: it calls `arguments[arguments.length - 1]`
    /// with its answer.
    async fn js_async(&self, script: &str) -> Result<Value, String> {
        self.cmd(
            "POST",
            "/execute/async",
            json!({"script": script, "args": []}),
        )
        .await
    }

    /// Signs in with `token` through the dialog (which must be open).
    async fn sign_in(&self, token: &str) {
        self.wait_for(
            "the token dialog",
            "return document.getElementById('login').open",
            Duration::from_secs(20),
        )
        .await;
        self.keys("#token", token).await;
        self.click("#connect").await;
        self.wait_for(
            "the dialog closes",
            "return !document.getElementById('login').open",
            Duration::from_secs(20),
        )
        .await;
    }

    /// The autocompletion list once shown: each item's label and kind.
    async fn completion_list(&self, what: &str) -> Vec<(String, String)> {
        let v = self
            .wait_for(
                what,
                "const l = document.getElementById('complete');
                 return l && !l.hidden && [...l.querySelectorAll('li')].map(li => [li.querySelector('.complete-name').textContent, li.dataset.kind]);",
                Duration::from_secs(10),
            )
            .await;
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i[0].as_str().unwrap().to_string(),
                    i[1].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    async fn completion_open(&self) -> bool {
        self.js(
            "const l = document.getElementById('complete'); return !!l && !l.hidden",
            json!([]),
        )
        .await
            == json!(true)
    }

    async fn sql(&self) -> String {
        self.js("return document.getElementById('sql').value", json!([]))
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The result tabs: (number, selected, title).
    async fn result_tabs(&self) -> Vec<(u64, bool, String)> {
        let v = self
            .js(
                "return [...document.querySelectorAll('#result-tabs .rtab')].map(t => [Number(t.dataset.n), t.getAttribute('aria-selected') === 'true', t.querySelector('.rtab-name').title])",
                json!([]),
            )
            .await;
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t[0].as_u64().unwrap(),
                    t[1].as_bool().unwrap(),
                    t[2].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The SQL of the history list, newest first.
    async fn history(&self) -> Vec<String> {
        let v = self
            .js(
                "return [...document.querySelectorAll('#history li .mono')].map(e => e.textContent)",
                json!([]),
            )
            .await;
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    }
}

/// The page's table equals DuckDB's answer to `sql` (names, types, cells).
async fn assert_table_is(b: &Browser, sql: &str) {
    assert_table_is_on(b, &duckdb::Connection::open_in_memory().unwrap(), sql).await
}

/// [`assert_table_is`] with DuckDB's answer on `conn`.
async fn assert_table_is_on(b: &Browser, conn: &duckdb::Connection, sql: &str) {
    let (want_head, want_rows) = duckdb_reference_on(conn, sql);
    let (head, rows) = b.table().await;
    assert_eq!(head, want_head, "the table shows the result of {sql}");
    assert_eq!(rows.len(), want_rows.len(), "rows of {sql}");
    compare_rows(&want_rows, &rows);
}

/// The local-storage key the console files the history of the identity
/// named `name` (`GET /whoami`'s) under.
fn history_key(name: &str) -> String {
    storage_key(
        "history",
        &format!("duckgate console history\nidentity\n{name}"),
    )
}

/// The local-storage key of the workspace of the identity named `name`.
fn workspace_key(name: &str) -> String {
    storage_key(
        "workspace",
        &format!("duckgate console workspace\nidentity\n{name}"),
    )
}

fn storage_key(kind: &str, hashed: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(hashed.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("duckgate.{kind}.{}", &hex[..32])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier browser: needs chromium and chromedriver; scripts/test installs it"]
async fn the_console_for_a_working_day() {
    let downloads = tempfile::tempdir().unwrap();
    let Some(b) = Browser::start(downloads.path()).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let g = a_gateway_beside_an_attached_catalog(&dir).await;
    b.goto(&g.url("/ui")).await;
    b.sign_in(TOKEN).await;
    let catalog = the_catalog_panel_is_get_catalogs(&b, &g).await;
    let functions = tables_complete_as_get_catalog_lists_them(&b, &g, &catalog).await;
    columns_complete_after_a_table_and_esc_closes_the_list(&b, &g, &catalog).await;
    the_functions_offered_are_the_ones_the_guard_allows(&b, &functions).await;
    let first_sql = enter_takes_a_function_and_its_sql_runs(&b, &g).await;
    result_tabs_keep_replace_and_close(&b, first_sql).await;
    the_cell_viewer_shows_a_cell_whole_and_copies_it(&b, &g).await;
    let chart_sql = the_charts_tooltip_shows_the_chosen_columns(&b).await;
    no_estimate_shows_a_spinner_not_a_bar(&b, &g).await;
    history_is_kept_per_identity_across_sessions(&b, &g, chart_sql).await;
    the_browser_logged_no_error(&b).await;
    let _ = b.cmd("DELETE", "", json!({})).await;
}

/// An attached catalog (a DuckDB file) beside the gateway's database,
/// which holds two tables of sales.
async fn a_gateway_beside_an_attached_catalog(dir: &tempfile::TempDir) -> common::Gateway {
    let file = dir.path().join("warehouse.duckdb");
    {
        let conn = duckdb::Connection::open(&file).unwrap();
        conn.execute_batch(
            "CREATE TABLE orders AS SELECT i AS id, 'r' || (i % 3) AS region FROM range(5) t(i)",
        )
        .unwrap();
    }
    let config = dir.path().join("duckgate.toml");
    std::fs::write(
        &config,
        format!(
            "[[attach]]\nname = \"warehouse\"\ntype = \"duckdb\"\npath = \"{}\"\n",
            file.display()
        ),
    )
    .unwrap();
    let g = common::Gateway::builder()
        .env(
            "DUCKGATE_QUERY_TOKENS",
            format!("first:{TOKEN},second:{SECOND_TOKEN}"),
        )
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_CONFIG", config.display())
        .env("DUCKGATE_POOL_SIZE", 2)
        .start();
    query_as(
        &g,
        TOKEN,
        "CREATE TABLE sales_daily AS SELECT DATE '2024-01-01' + i::INTEGER AS day, i * 3 AS amount FROM range(10) t(i)",
    )
    .await;
    query_as(
        &g,
        TOKEN,
        "CREATE TABLE sales_monthly AS SELECT i AS month, i * 100 AS amount, 'note ' || i AS remark FROM range(12) t(i)",
    )
    .await;
    g
}

/// The catalog panel: the gateway's database and the attached catalog in
/// their own groups, each schema with its table count in words, the
/// same databases, kinds, schemas and tables as GET /catalog.
async fn the_catalog_panel_is_get_catalogs(b: &Browser, g: &common::Gateway) -> Value {
    b.wait_for(
        "the catalog shows sales_monthly",
        "return [...document.querySelectorAll('#catalog .table-node')].some(t => t.dataset.table === 'sales_monthly')",
        Duration::from_secs(30),
    )
    .await;
    let panel = b
        .js(
            "return [...document.querySelectorAll('#catalog .db-node')].map(d => ({
               name: d.dataset.db, kind: d.dataset.kind, group: d.closest('.catalog-group').id,
               label: (d.querySelector(':scope > summary .db-kind') || {}).textContent || '',
               schemas: [...d.querySelectorAll(':scope > .schema-node')].map(s => ({
                 name: s.dataset.schema, summary: s.querySelector(':scope > summary').textContent,
                 tables: [...s.querySelectorAll(':scope > .table-node')].map(t => t.dataset.table) })) }))",
            json!([]),
        )
        .await;
    let (status, catalog) = g.get("/catalog", TOKEN).await;
    assert_eq!(status, 200);
    let dbs = catalog["databases"].as_array().unwrap();
    let panel = panel.as_array().unwrap();
    assert_eq!(panel.len(), dbs.len(), "{panel:?} against {catalog}");
    assert!(
        dbs.iter()
            .any(|d| d["name"] == "warehouse" && d["kind"] == "duckdb"),
        "the attached catalog is listed: {catalog}"
    );
    for d in dbs {
        let p = panel
            .iter()
            .find(|p| p["name"] == d["name"])
            .unwrap_or_else(|| panic!("{} not in the panel", d["name"]));
        assert_eq!(p["kind"], d["kind"]);
        let own = d["kind"] == "gateway";
        assert_eq!(
            p["group"],
            if own { "catalog-own" } else { "catalog-lakes" },
            "{p}"
        );
        let label = p["label"].as_str().unwrap();
        assert_eq!(
            label.ends_with("read-only"),
            d["read_only"] == true,
            "{label}"
        );
        let schemas = d["schemas"].as_array().unwrap();
        let shown = p["schemas"].as_array().unwrap();
        assert_eq!(shown.len(), schemas.len());
        for (s, ps) in schemas.iter().zip(shown) {
            assert_eq!(ps["name"], s["name"]);
            let tables: Vec<&Value> = s["tables"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| &t["name"])
                .collect();
            let shown_tables: Vec<&Value> = ps["tables"].as_array().unwrap().iter().collect();
            assert_eq!(shown_tables, tables);
            let n = tables.len();
            let count = match n {
                0 => "no tables".to_string(),
                1 => "1 table".to_string(),
                n => format!("{n} tables"),
            };
            assert_eq!(
                ps["summary"],
                format!("{} · {count}", s["name"].as_str().unwrap()),
                "no bare `(N)`"
            );
        }
    }
    b.screenshot("catalog").await;
    catalog
}

/// Autocompletion of tables: typing offers exactly the tables GET
/// /catalog lists under that prefix; ↓ then Tab takes the second.
async fn tables_complete_as_get_catalog_lists_them(
    b: &Browser,
    g: &common::Gateway,
    catalog: &Value,
) -> Vec<String> {
    let dbs = catalog["databases"].as_array().unwrap();
    let (_, functions) = g.get("/catalog/functions", TOKEN).await;
    let functions: Vec<String> = functions["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    let all_tables: Vec<String> = dbs
        .iter()
        .flat_map(|d| d["schemas"].as_array().unwrap().iter())
        .flat_map(|s| s["tables"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    b.set_sql("").await;
    b.keys("#sql", "SELECT * FROM sales_").await;
    let items = b.completion_list("the table list").await;
    let want: Vec<String> = all_tables
        .iter()
        .filter(|t| t.starts_with("sales_"))
        .chain(functions.iter().filter(|f| f.starts_with("sales_")))
        .cloned()
        .collect();
    assert_eq!(
        items.iter().map(|i| i.0.clone()).collect::<Vec<_>>(),
        want,
        "{items:?}"
    );
    assert!(want.len() >= 2);
    b.screenshot("autocomplete").await;
    b.keys("#sql", "\u{E015}\u{E004}").await; // ↓, Tab
    assert_eq!(b.sql().await, format!("SELECT * FROM {}", items[1].0));
    assert!(!b.completion_open().await, "accepting closes the list");
    functions
}

/// Columns after `table.`: those GET /catalog/{db}/{schema}/{table} lists.
async fn columns_complete_after_a_table_and_esc_closes_the_list(
    b: &Browser,
    g: &common::Gateway,
    catalog: &Value,
) {
    let dbs = catalog["databases"].as_array().unwrap();
    b.keys("#sql", " WHERE sales_monthly.").await;
    let items = b.completion_list("the column list").await;
    // Where the gateway put the table (`client` under the read-write policy).
    let (db, schema) = dbs
        .iter()
        .flat_map(|d| d["schemas"].as_array().unwrap().iter().map(move |s| (d, s)))
        .find(|(_, s)| {
            s["tables"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == "sales_monthly")
        })
        .map(|(d, s)| (d["name"].as_str().unwrap(), s["name"].as_str().unwrap()))
        .unwrap();
    let (_, detail) = g
        .get(&format!("/catalog/{db}/{schema}/sales_monthly"), TOKEN)
        .await;
    let columns: Vec<String> = detail["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        items,
        columns
            .iter()
            .map(|c| (c.clone(), "column".to_string()))
            .collect::<Vec<_>>()
    );
    // Esc closes it and leaves the text alone.
    let before = b.sql().await;
    b.keys("#sql", "\u{E00C}").await;
    assert!(!b.completion_open().await, "Esc closes the list");
    assert_eq!(b.sql().await, before);
}

/// Functions: the names GET /catalog/functions lists, every one allowed
/// by the guard's allow-list; refused ones of the same prefix are not
/// offered.
async fn the_functions_offered_are_the_ones_the_guard_allows(b: &Browser, functions: &[String]) {
    let verdicts: std::collections::HashMap<String, String> = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine/guard/functions.tsv"),
    )
    .unwrap()
    .lines()
    .filter(|l| !l.starts_with('#'))
    .filter_map(|l| {
        let mut c = l.split('\t');
        // DuckDB's names compared as the guard compares them.
        Some((c.next()?.to_ascii_lowercase(), c.nth(1)?.to_string()))
    })
    .collect();
    for f in functions {
        assert!(
            ["allow", "table", "reader"].contains(&verdicts[f].as_str()),
            "{f} is listed but the guard's verdict is {}",
            verdicts[f]
        );
    }
    for (prefix, refused) in [
        ("json_ex", "json_execute_serialized_sql"),
        ("current_s", "current_setting"),
    ] {
        assert_eq!(verdicts[refused], "refuse", "{refused}");
        b.set_sql("").await;
        b.keys("#sql", &format!("SELECT {prefix}")).await;
        let items = b.completion_list(&format!("functions for {prefix}")).await;
        let want: Vec<(String, String)> = functions
            .iter()
            .filter(|f| f.starts_with(prefix))
            .map(|f| (f.clone(), "function".to_string()))
            .collect();
        assert!(!want.is_empty());
        assert_eq!(items, want);
        assert!(!items.iter().any(|i| i.0 == refused), "{refused} offered");
    }
}

/// Enter takes a function (with its parenthesis); the SQL runs, and its
/// answer is /query's.
async fn enter_takes_a_function_and_its_sql_runs(b: &Browser, g: &common::Gateway) -> &'static str {
    b.set_sql("").await;
    b.keys("#sql", "SELECT uppe").await;
    let items = b.completion_list("upper").await;
    assert_eq!(items[0].0, "upper");
    b.keys("#sql", "\u{E007}").await; // Enter
    assert_eq!(b.sql().await, "SELECT upper(");
    b.keys("#sql", "'tab one') AS first").await;
    b.keys("#sql", "\u{E009}\u{E007}\u{E000}").await; // Ctrl+Enter
    assert_eq!(b.wait_end().await, "succeeded");
    let first_sql = "SELECT upper('tab one') AS first";
    assert_eq!(b.sql().await, first_sql);
    let answer = query_as(g, TOKEN, first_sql).await;
    let (_, rows) = b.table().await;
    assert_eq!(rows[0].1[0], answer["rows"][0][0].as_str().unwrap());
    first_sql
}

/// Result tabs: a run in a new tab keeps the first; a run replaces the
/// current tab's result; closing a tab shows its neighbour.
async fn result_tabs_keep_replace_and_close(b: &Browser, first_sql: &str) {
    let second_sql = "SELECT 2 AS second, 'b' AS letter";
    b.set_sql(second_sql).await;
    b.click("#run-new").await;
    assert_eq!(b.wait_end().await, "succeeded");
    let tabs = b.result_tabs().await;
    assert_eq!(
        tabs.iter().map(|t| (t.1, t.2.as_str())).collect::<Vec<_>>(),
        vec![(false, first_sql), (true, second_sql)]
    );
    assert_table_is(b, second_sql).await;
    b.click(&format!(
        "#result-tabs .rtab[data-n=\"{}\"] .rtab-name",
        tabs[0].0
    ))
    .await;
    assert_table_is(b, first_sql).await;
    let third_sql = "SELECT i AS third FROM range(3) t(i)";
    assert_eq!(b.run(third_sql).await, "succeeded");
    let tabs = b.result_tabs().await;
    assert_eq!(
        tabs.iter().map(|t| (t.1, t.2.as_str())).collect::<Vec<_>>(),
        vec![(true, third_sql), (false, second_sql)],
        "the run replaced the current tab's result"
    );
    assert_table_is(b, third_sql).await;
    b.click(&format!(
        "#result-tabs .rtab[data-n=\"{}\"] .rtab-name",
        tabs[1].0
    ))
    .await;
    assert_table_is(b, second_sql).await;
    b.screenshot("result-tabs").await;
    b.click(&format!(
        "#result-tabs .rtab[data-n=\"{}\"] .rtab-close",
        tabs[1].0
    ))
    .await;
    let left = b.result_tabs().await;
    assert_eq!(
        left.iter().map(|t| (t.1, t.2.as_str())).collect::<Vec<_>>(),
        vec![(true, third_sql)]
    );
    assert_table_is(b, third_sql).await;
}

/// The cell viewer: a JSON cell opens pretty-printed (the same value as
/// /query's), a long text whole; Copy puts it on the clipboard.
async fn the_cell_viewer_shows_a_cell_whole_and_copies_it(b: &Browser, g: &common::Gateway) {
    let cell_sql =
        "SELECT json_object('b', [1, 2, json_object('c', 'x')], 'a', repeat('long ', 20)) AS doc, \
                    repeat('word ', 60) || 'end' AS prose";
    assert_eq!(b.run(cell_sql).await, "succeeded");
    let answer = query_as(g, TOKEN, cell_sql).await;
    let long = b
        .js(
            "return document.querySelector('.grid-row[data-row=\"0\"] .cell[data-col=\"1\"]').classList.contains('cell-long')",
            json!([]),
        )
        .await;
    assert_eq!(long, json!(true), "a cut cell is marked");
    b.click(".grid-row[data-row=\"0\"] .cell[data-col=\"0\"]")
        .await;
    let shown = b
        .wait_for(
            "the cell panel",
            "const v = document.getElementById('cell-viewer'); return !v.hidden && document.getElementById('cell-text').textContent",
            Duration::from_secs(10),
        )
        .await;
    let shown = shown.as_str().unwrap();
    let want = match &answer["rows"][0][0] {
        Value::String(s) => serde_json::from_str::<Value>(s).unwrap(),
        v => v.clone(),
    };
    assert_eq!(
        serde_json::from_str::<Value>(shown).unwrap(),
        want,
        "the JSON shown is /query's"
    );
    assert!(
        shown.lines().count() > 5 && shown.contains("\n  \""),
        "pretty-printed: {shown}"
    );
    b.screenshot("cell-viewer").await;
    b.click(".grid-row[data-row=\"0\"] .cell[data-col=\"1\"]")
        .await;
    let prose = answer["rows"][0][1].as_str().unwrap();
    b.wait_for(
        "the long text in the panel",
        &format!(
            "return document.getElementById('cell-text').textContent === {}",
            serde_json::to_string(prose).unwrap()
        ),
        Duration::from_secs(10),
    )
    .await;
    let _ = b
        .cmd(
            "POST",
            "/goog/cdp/execute",
            json!({"cmd": "Browser.grantPermissions",
                   "params": {"origin": g.base, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]}}),
        )
        .await;
    b.click("#cell-copy").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    match b
        .js_async(
            "const done = arguments[arguments.length - 1];
             navigator.clipboard.readText().then(done, (e) => done({error: String(e)}));",
        )
        .await
    {
        Ok(Value::String(copied)) => assert_eq!(copied, prose, "the clipboard holds the cell"),
        other => {
            // No clipboard in this browser: the text is selected instead.
            eprintln!("clipboard not readable here ({other:?}); checking the selection");
            let sel = b
                .js("return String(window.getSelection())", json!([]))
                .await;
            assert_eq!(sel.as_str().unwrap(), prose);
        }
    }
    b.click("#cell-close").await;
}

/// The chart: x and y chosen; the tooltip over a bar shows that row's
/// values of exactly the chosen columns.
async fn the_charts_tooltip_shows_the_chosen_columns(b: &Browser) -> &'static str {
    let chart_sql = "SELECT 'r' || i AS region, i * 10 AS total, i * i AS other, i % 3 AS bucket \
                     FROM range(1, 8) t(i) ORDER BY i";
    assert_eq!(b.run(chart_sql).await, "succeeded");
    let (_, reference) = duckdb_reference(chart_sql);
    b.click(".tab[data-tab=\"chart\"]").await;
    let axes = b
        .wait_for(
            "the axis pickers",
            "const x = document.getElementById('chart-x');
             return x.options.length && document.getElementById('chart').dataset.layout && [[...x.options].map(o => o.textContent), x.value,
               [...document.querySelectorAll('#chart-y input')].map(i => [i.parentNode.textContent.trim(), i.checked])]",
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(
        axes,
        json!([
            ["region", "total", "other", "bucket"],
            "0",
            [["total", true], ["other", true], ["bucket", true]]
        ])
    );
    // Leave `other` out.
    b.click("#chart-y input[value=\"2\"]").await;
    let hover = |row: usize| {
        format!(
            "const c = document.getElementById('chart'); const l = JSON.parse(c.dataset.layout);
             const r = c.getBoundingClientRect();
             c.dispatchEvent(new MouseEvent('mousemove', {{bubbles: true, clientX: r.left + l.left + l.band * ({row} + 0.5), clientY: r.top + l.top + l.height / 2}}));
             const t = document.getElementById('chart-tip');
             return !t.hidden && [t.querySelector('.tip-x').textContent,
               [...t.querySelectorAll('.tip-row')].map(e => [e.dataset.col, e.querySelector('.tip-value').textContent])];"
        )
    };
    let tip = b.js(&hover(3), json!([])).await;
    let cell = |r: usize, c: usize| reference[r][c].clone().unwrap();
    assert_eq!(
        tip,
        json!([cell(3, 0), [["total", cell(3, 1)], ["bucket", cell(3, 3)]]]),
        "the tooltip of row 3"
    );
    b.screenshot("chart-tooltip").await;
    // x = total: the rows' totals label the bands; bucket is the series.
    b.js(
        "const x = document.getElementById('chart-x'); x.value = '1'; x.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .await;
    let tip = b.js(&hover(5), json!([])).await;
    assert_eq!(tip, json!([cell(5, 1), [["bucket", cell(5, 3)]]]));
    b.click(".tab[data-tab=\"table\"]").await;
    chart_sql
}

/// A query DuckDB cannot estimate (a recursive CTE): a spinner, not a
/// bar at 0%; the gateway's own progress for it has no percentage.
async fn no_estimate_shows_a_spinner_not_a_bar(b: &Browser, g: &common::Gateway) {
    b.set_sql(
        "WITH RECURSIVE t(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM t WHERE i < 50000000) SELECT count(*) FROM t",
    )
    .await;
    b.click("#run").await;
    let id = b
        .wait_for(
            "the spinner",
            "const s = document.getElementById('status').dataset.state;
             return s === 'running' && !document.getElementById('progress').hidden
               && !document.getElementById('progress-spinner').hidden
               && document.getElementById('stmt-id').textContent.replace('statement ', '')",
            Duration::from_secs(30),
        )
        .await;
    let id = id.as_str().unwrap().to_string();
    let shown = b
        .js(
            "return [document.getElementById('progress-track').hidden, document.getElementById('progress-text').textContent]",
            json!([]),
        )
        .await;
    let (status, q) = g.get(&format!("/queries/{id}"), TOKEN).await;
    assert_eq!(status, 200, "{q}");
    // No estimate: no percentage, or 0% with nothing processed (DuckDB's
    // figure for another operator, which never moves).
    let p = &q["progress"];
    assert!(
        p["percentage"].is_null()
            || (p["percentage"].as_f64() == Some(0.0) && p["rows_processed"].as_u64() == Some(0)),
        "DuckDB has an estimate after all: {q}"
    );
    assert_eq!(shown[0], true, "no bar without an estimate");
    assert!(!shown[1].as_str().unwrap().contains('%'), "{shown}");
    b.screenshot("progress-unknown").await;
    b.click("#cancel").await;
    assert_eq!(b.wait_end().await, "cancelled");
}

/// History: in local storage under a hash of the identity's name (the
/// token is stored nowhere there), kept across sessions, one per
/// identity; beside it the identity's workspace.
async fn history_is_kept_per_identity_across_sessions(
    b: &Browser,
    g: &common::Gateway,
    chart_sql: &str,
) {
    let mine = b.history().await;
    assert_eq!(mine.len(), 6, "{mine:?}");
    assert_eq!(mine[1], chart_sql);
    let stored = b
        .js(
            "return Object.keys(localStorage).sort().map(k => [k, localStorage.getItem(k)])",
            json!([]),
        )
        .await;
    let stored = stored.as_array().unwrap();
    let mut want_keys = vec![history_key("first"), workspace_key("first")];
    want_keys.sort();
    assert_eq!(
        stored.iter().map(|s| s[0].clone()).collect::<Vec<_>>(),
        want_keys,
        "{stored:?}"
    );
    let history = stored
        .iter()
        .find(|s| s[0] == history_key("first"))
        .unwrap();
    let kept: Vec<Value> = serde_json::from_str(history[1].as_str().unwrap()).unwrap();
    assert_eq!(
        kept.iter()
            .map(|h| h["sql"].as_str().unwrap())
            .collect::<Vec<_>>(),
        mine
    );
    for (k, v) in stored.iter().map(|s| (&s[0], &s[1])) {
        assert!(!k.as_str().unwrap().contains(TOKEN) && !v.as_str().unwrap().contains(TOKEN));
    }
    // A new session (the tab's token gone): the same history once the same
    // token is given.
    b.js("sessionStorage.clear()", json!([])).await;
    b.goto("about:blank").await;
    b.goto(&g.url("/ui")).await;
    b.sign_in(TOKEN).await;
    assert_eq!(b.history().await, mine, "history kept across sessions");
    // Another token: its own, empty history.
    b.click("#signout").await;
    b.sign_in(SECOND_TOKEN).await;
    assert_eq!(b.history().await, Vec::<String>::new());
    let theirs = "SELECT 'second token' AS who";
    assert_eq!(b.run(theirs).await, "succeeded");
    assert_eq!(b.history().await, vec![theirs.to_string()]);
    let keys = b
        .js(
            "return Object.keys(localStorage).filter(k => k.startsWith('duckgate.history.')).sort()",
            json!([]),
        )
        .await;
    let mut want = vec![history_key("first"), history_key("second")];
    want.sort();
    assert_eq!(keys, json!(want));
    b.click("#signout").await;
    b.sign_in(TOKEN).await;
    assert_eq!(b.history().await, mine);
}

/// The browser logged no error.
async fn the_browser_logged_no_error(b: &Browser) {
    let severe: Vec<Value> = b
        .log("browser")
        .await
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        .collect();
    assert!(severe.is_empty(), "console errors: {severe:?}");
}

/// Where screenshots go: `docs/screenshots/` when asked for
/// (`DUCKGATE_SCREENSHOTS=docs`, to renew the docs' pictures), else the
/// build's scratch directory.
fn screenshot_dir() -> PathBuf {
    if std::env::var("DUCKGATE_SCREENSHOTS").as_deref() == Ok("docs") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots")
    }
}

/// The result the profile and the digit grouping are checked on: numbers
/// with NULLs and signs, a DECIMAL, text whose order is UTF-8's (a
/// character past U+FFFF sorts after U+FF5A, unlike UTF-16's), dates and
/// booleans.
const MEASURES_SQL: &str = "SELECT i AS id, i * 1234567891 AS big, \
    CASE WHEN i % 11 = 0 THEN NULL ELSE CAST(((i * 7919) % 1000003) / 100.0 AS DECIMAL(12,2)) END AS amount, \
    CASE WHEN i % 13 = 0 THEN NULL ELSE sin(i) * 1000 END AS ratio, \
    CASE WHEN i % 17 = 0 THEN NULL ELSE 'region ' || (i % 5) END AS region, \
    ['a', 'é', 'ｚ', '😀', 'z'][i % 5 + 1] AS mark, \
    DATE '2024-01-01' + (i % 400)::INTEGER AS day, i % 3 = 0 AS flag \
    FROM range(5000) t(i)";
/// A large result: kept in part, loaded again or run again on demand.
const LARGE_SQL: &str = "SELECT i, 'row ' || i AS s FROM range(300000) t(i)";
/// A JSON cell that, opened, overflows a short window.
const JSON_SQL: &str = "SELECT i, json_object('b', [1, 2, json_object('c', 'x')], 'a', repeat('long ', 20), 'k', range(i)) AS doc \
    FROM range(40) t(i)";

/// DuckDB's answer to `sql`, each value as its VARCHAR cast (NULL: `None`).
fn duck_text(conn: &duckdb::Connection, sql: &str) -> Vec<Vec<Option<String>>> {
    let mut stmt = conn
        .prepare(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM ({sql})"))
        .unwrap();
    stmt.query_map([], |r| {
        let n = r.as_ref().column_count();
        (0..n)
            .map(|i| r.get::<_, Option<String>>(i))
            .collect::<Result<Vec<_>, _>>()
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// DuckDB's digits of `column` grouped by thousands, as `format('{:,}')`
/// groups an integer, the fraction as DuckDB prints it; `decimal` and
/// `group` the locale's separators.
fn grouped_reference(
    conn: &duckdb::Connection,
    column: &str,
    decimal: &str,
    group: &str,
) -> Vec<Option<String>> {
    let v = format!("CAST({column} AS VARCHAR)");
    duck_text(
        conn,
        &format!(
            "SELECT CASE WHEN {column} IS NULL THEN NULL ELSE \
               (CASE WHEN starts_with({v}, '-') THEN '-' ELSE '' END) \
               || format('{{:,}}', CAST(ltrim(split_part({v}, '.', 1), '-') AS HUGEINT)) \
               || CASE WHEN contains({v}, '.') THEN '.' || split_part({v}, '.', 2) ELSE '' END END \
             FROM measures ORDER BY id"
        ),
    )
    .into_iter()
    .map(|r| {
        r[0].clone().map(|s| {
            s.chars()
                .map(|c| match c {
                    ',' => group.to_string(),
                    '.' => decimal.to_string(),
                    c => c.to_string(),
                })
                .collect()
        })
    })
    .collect()
}

impl Browser {
    /// The result tabs as shown: (number, selected, title shown, tooltip).
    async fn tab_strip(&self) -> Vec<(u64, bool, String, String)> {
        let v = self
            .js(
                "return [...document.querySelectorAll('#result-tabs .rtab')].map(t => [Number(t.dataset.n),
                   t.getAttribute('aria-selected') === 'true', t.querySelector('.rtab-name').dataset.title,
                   t.querySelector('.rtab-name').title])",
                json!([]),
            )
            .await;
        serde_json::from_value::<Vec<(u64, bool, String, String)>>(v).unwrap()
    }

    /// Runs `sql` in a new result tab and waits for its end.
    async fn run_in_new_tab(&self, sql: &str) -> String {
        self.set_sql(sql).await;
        self.click("#run-new").await;
        self.wait_end().await
    }

    /// Shows result tab `n` and waits for its table.
    async fn show_tab(&self, n: u64) {
        self.click(&format!("#result-tabs .rtab[data-n=\"{n}\"] .rtab-name"))
            .await;
        self.wait_for(
            "the tab's result",
            &format!(
                "return document.querySelector('#result-tabs .rtab[data-n=\"{n}\"]').getAttribute('aria-selected') === 'true'
                   && document.getElementById('table-pane').dataset.loaded"
            ),
            Duration::from_secs(30),
        )
        .await;
    }

    /// Reloads the page and waits until the console is signed in again.
    async fn reload(&self) {
        self.js("location.reload()", json!([])).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.wait_for(
            "the console after the reload",
            "return document.readyState === 'complete' && !document.getElementById('signout').hidden",
            Duration::from_secs(30),
        )
        .await;
    }
}

/// What the workspace tabs read (beside `LARGE_SQL` and `JSON_SQL`).
const READS: &str = "SELECT * FROM sales_monthly ORDER BY month";
/// The measures, in order: the tab the digits and the profile are checked on.
const MEASURES: &str = "SELECT * FROM measures ORDER BY id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier browser: needs chromium and chromedriver; scripts/test installs it"]
async fn the_console_keeps_its_workspace() {
    let issuer = LocalIssuer::new();
    let dir = tempfile::tempdir().unwrap();
    let g = a_gateway_where_first_holds_two_roles(&dir, &issuer).await;
    let duck = duckdb_over_the_same_rows();
    let (_, who) = g.get("/whoami", TOKEN).await;
    assert_eq!(who["name"], "first", "{who}");
    assert_eq!(who["roles"], json!(["analyst", "viewer"]), "{who}");

    for (round, window) in [
        Window {
            width: 1400,
            height: 757,
            locale: "en-US",
        },
        Window {
            width: 1920,
            height: 1080,
            locale: "de-DE",
        },
    ]
    .into_iter()
    .enumerate()
    {
        let downloads = tempfile::tempdir().unwrap();
        let Some(b) = Browser::start_with(downloads.path(), window).await else {
            return;
        };
        // Each step leaves the page as the next one expects it.
        let r = Round::new(b, &g, &duck, window, round);
        the_page_has_the_windows_viewport_and_locale(&r).await;
        the_header_shows_whoami(&r, &who).await;
        let tabs = tabs_are_titled_by_what_they_read_and_duckdbs_count(&r).await;
        the_cell_viewer_stays_on_top_and_in_view(&r).await;
        let head = digits_are_grouped_and_copied_as_duckdbs_text(&r, &tabs).await;
        the_profile_is_duckdbs(&r, &head).await;
        let before = a_reload_restores_the_draft_and_every_tab(&r, &head).await;
        let (id, kept) = a_large_result_is_kept_in_part(&r, &before).await;
        the_rest_loads_or_runs_again_on_demand(&r, &before, &id, kept).await;
        an_expired_token_is_said_and_a_new_one_carries_on(&r, &issuer).await;
        nothing_was_missing_and_nothing_broke(&r).await;
        the_browser_leaves_nothing_behind(r.b);
    }
}

/// One round of the workspace scenario: a browser in one window and
/// locale, against the gateway and DuckDB over the same rows.
struct Round<'a> {
    /// This round's browser.
    b: Browser,
    /// The gateway, the same for every round.
    g: &'a common::Gateway,
    /// DuckDB over the gateway's rows.
    duck: &'a duckdb::Connection,
    /// The window and locale of this round.
    window: Window,
    /// The round's number: screenshots are taken in round 0 only.
    round: usize,
    /// The locale's decimal separator.
    decimal: &'static str,
    /// The locale's digit group separator.
    group: &'static str,
}

impl<'a> Round<'a> {
    fn new(
        b: Browser,
        g: &'a common::Gateway,
        duck: &'a duckdb::Connection,
        window: Window,
        round: usize,
    ) -> Round<'a> {
        let (decimal, group) = if window.locale == "de-DE" {
            (",", ".")
        } else {
            (".", ",")
        };
        Round {
            b,
            g,
            duck,
            window,
            round,
            decimal,
            group,
        }
    }

    /// The screenshot's name, in the first round only.
    fn shot(&self, name: &str) -> Option<String> {
        (self.round == 0).then(|| name.to_string())
    }

    /// DuckDB's count of `sql`'s rows.
    fn count(&self, sql: &str) -> String {
        duck_text(self.duck, &format!("SELECT count(*) FROM ({sql})"))[0][0]
            .clone()
            .unwrap()
    }

    /// A count grouped as DuckDB's `format('{:,}')` groups it, with the
    /// locale's separator.
    fn grouped(&self, n: String) -> String {
        duck_text(self.duck, &format!("SELECT format('{{:,}}', {n}::HUGEINT)"))[0][0]
            .clone()
            .unwrap()
            .replace(',', self.group)
    }

    /// `sql`'s row count as a tab's title says it.
    fn rows(&self, sql: &str) -> String {
        let n = self.count(sql);
        format!(
            "{} {}",
            self.grouped(n.clone()),
            if n == "1" { "row" } else { "rows" }
        )
    }
}

/// The gateway: `first` holds two roles, `second` none, and JWTs of
/// `issuer` are taken; it holds the measures and the monthly sales.
async fn a_gateway_where_first_holds_two_roles(
    dir: &tempfile::TempDir,
    issuer: &LocalIssuer,
) -> common::Gateway {
    let config = dir.path().join("roles.toml");
    std::fs::write(
        &config,
        "[[role]]\nname = \"analyst\"\nmembers = [\"first\"]\nread = [\"*.*.*\"]\n\n\
         [[role]]\nname = \"viewer\"\nmembers = [\"first\"]\nread = [\"*.*.*\"]\n",
    )
    .unwrap();
    let mut builder = common::Gateway::builder()
        .env(
            "DUCKGATE_QUERY_TOKENS",
            format!("first:{TOKEN},second:{SECOND_TOKEN}"),
        )
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_CONFIG", config.display())
        .env("DUCKGATE_POOL_SIZE", 2);
    for (k, v) in issuer.settings() {
        builder = builder.env(k, v);
    }
    let g = builder.start();
    query_as(
        &g,
        SECOND_TOKEN,
        &format!("CREATE TABLE measures AS {MEASURES_SQL}"),
    )
    .await;
    query_as(
        &g,
        SECOND_TOKEN,
        "CREATE TABLE sales_monthly AS SELECT i AS month, i * 100 AS amount FROM range(12) t(i)",
    )
    .await;
    g
}

/// DuckDB's own answers over the same rows.
fn duckdb_over_the_same_rows() -> duckdb::Connection {
    let duck = duckdb::Connection::open_in_memory().unwrap();
    duck.execute_batch(&format!(
        "CREATE TABLE measures AS {MEASURES_SQL}; \
         CREATE TABLE sales_monthly AS SELECT i AS month, i * 100 AS amount FROM range(12) t(i)"
    ))
    .unwrap();
    duck
}

/// The page has the round's viewport and locale; it signs in.
async fn the_page_has_the_windows_viewport_and_locale(r: &Round<'_>) {
    let (b, g, window) = (&r.b, r.g, r.window);
    let size = b
        .js(
            "return [innerWidth, innerHeight, Intl.NumberFormat().resolvedOptions().locale]",
            json!([]),
        )
        .await;
    eprintln!(
        "window {}x{} ({}): the page's viewport and locale {size}",
        window.width, window.height, window.locale
    );
    assert_eq!(size[2], window.locale);
    b.goto(&g.url("/ui")).await;
    b.sign_in(TOKEN).await;
}

/// Who is signed in: /whoami's name and roles.
async fn the_header_shows_whoami(r: &Round<'_>, who: &Value) {
    let b = &r.b;
    let shown = b
        .wait_for(
            "the identity in the header",
            "const n = document.querySelector('#who .who-name');
             return n && [n.textContent, [...document.querySelectorAll('#who .who-role')].map(r => r.textContent)]",
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(shown, json!([who["name"], who["roles"]]));
}

/// Tabs titled by their result: the table read and DuckDB's count.
async fn tabs_are_titled_by_what_they_read_and_duckdbs_count(
    r: &Round<'_>,
) -> Vec<(u64, bool, String, String)> {
    let b = &r.b;
    let (reads, measures) = (READS, MEASURES);
    let rows = |sql: &str| r.rows(sql);
    assert_eq!(b.run(reads).await, "succeeded");
    assert_eq!(b.run_in_new_tab(measures).await, "succeeded");
    assert_eq!(b.run_in_new_tab(LARGE_SQL).await, "succeeded");
    assert_eq!(
        b.run_in_new_tab("SELECT upper('tab one') AS first").await,
        "succeeded"
    );
    assert_eq!(b.run_in_new_tab(JSON_SQL).await, "succeeded");
    let tabs = b.tab_strip().await;
    let titles: Vec<(String, String)> = tabs.iter().map(|t| (t.2.clone(), t.3.clone())).collect();
    assert_eq!(
        titles,
        vec![
            (
                format!("sales_monthly · {}", rows(reads)),
                reads.to_string()
            ),
            (
                format!("measures · {}", rows(measures)),
                measures.to_string()
            ),
            (
                format!("range() · {}", rows(LARGE_SQL)),
                LARGE_SQL.to_string()
            ),
            (
                format!("first · {}", rows("SELECT 1")),
                "SELECT upper('tab one') AS first".to_string()
            ),
            (
                format!("range() · {}", rows(JSON_SQL)),
                JSON_SQL.to_string()
            ),
        ],
        "titled by what they read and how many rows DuckDB counts"
    );
    tabs
}

/// The cell viewer over everything: a long JSON value opened in a
/// short window keeps its title, Copy and Close on top, in view.
async fn the_cell_viewer_stays_on_top_and_in_view(r: &Round<'_>) {
    let (b, window) = (&r.b, r.window);
    let shot = |name: &str| r.shot(name);
    b.click(".grid-row[data-row=\"3\"] .cell[data-col=\"1\"]")
        .await;
    let placed = b
        .wait_for(
            "the cell viewer",
            "const v = document.getElementById('cell-viewer');
             if (v.hidden) return null;
             const grid = document.querySelector('.grid-viewport').getBoundingClientRect();
             const box = v.getBoundingClientRect();
             return {
               parts: ['cell-title', 'cell-copy', 'cell-close'].map(id => {
                 const r = document.getElementById(id).getBoundingClientRect();
                 const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
                 return [id, !!top && (top.id === id || document.getElementById(id).contains(top)),
                         r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight];
               }),
               over_table: box.top < grid.bottom && box.bottom > grid.top && box.left < grid.right && box.right > grid.left,
               inside: box.left >= 0 && box.top >= 0 && box.right <= innerWidth && box.bottom <= innerHeight,
             };",
            Duration::from_secs(10),
        )
        .await;
    for part in placed["parts"].as_array().unwrap() {
        assert_eq!(
            (part[1].as_bool(), part[2].as_bool()),
            (Some(true), Some(true)),
            "{} at {}x{}: on top and in view ({placed})",
            part[0],
            window.width,
            window.height
        );
    }
    assert_eq!(placed["inside"], true, "{placed}");
    assert_eq!(
        placed["over_table"], true,
        "the viewer lies over the table: {placed}"
    );
    if let Some(name) = shot("cell-viewer-over-table") {
        b.screenshot(&name).await;
    }
    b.click("#cell-close").await;
}

/// Digits grouped in the locale, DuckDB's text kept for copying.
async fn digits_are_grouped_and_copied_as_duckdbs_text(
    r: &Round<'_>,
    tabs: &[(u64, bool, String, String)],
) -> Head {
    let (b, duck, window) = (&r.b, r.duck, r.window);
    let (decimal, group, measures) = (r.decimal, r.group, MEASURES);
    b.show_tab(tabs[1].0).await;
    let (_, shown_rows) = b.shown_table().await;
    let (_, raw_rows) = b.table().await;
    let (head, want_rows) = duckdb_reference_on(duck, measures);
    compare_rows(&want_rows, &raw_rows);
    for (c, (name, _)) in head.iter().enumerate().filter(|(_, (_, t))| {
        ["BIGINT", "DOUBLE"].contains(&t.as_str()) || t.starts_with("DECIMAL")
    }) {
        let want = grouped_reference(duck, name, decimal, group);
        for (i, cells, nulls) in &shown_rows {
            if nulls[c] {
                assert_eq!(want[*i as usize], None);
                continue;
            }
            assert_eq!(
                Some(&cells[c]),
                want[*i as usize].as_ref(),
                "row {i} column {name}: grouped as {} groups",
                window.locale
            );
        }
    }
    assert!(
        shown_rows
            .iter()
            .any(|(_, cells, _)| cells[1].contains(group)),
        "some number is grouped: {shown_rows:?}"
    );
    let copied = b
        .js(
            "const a = document.querySelector('.grid-row[data-row=\"3\"] .cell[data-col=\"1\"]');
             const z = document.querySelector('.grid-row[data-row=\"4\"] .cell[data-col=\"2\"]');
             const copy = (start, end) => {
               const r = document.createRange(); r.setStart(start, 0); r.setEnd(end, end.childNodes.length);
               const sel = getSelection(); sel.removeAllRanges(); sel.addRange(r);
               const dt = new DataTransfer();
               a.dispatchEvent(new ClipboardEvent('copy', {clipboardData: dt, bubbles: true, cancelable: true}));
               sel.removeAllRanges();
               return dt.getData('text/plain');
             };
             return [a.textContent, copy(a, a), copy(a, z)];",
            json!([]),
        )
        .await;
    // A copy across rows: from row 3's second cell to row 4's third,
    // as the selection runs (a line per row, a tab between cells).
    let line = |r: usize, cols: std::ops::RangeInclusive<usize>| {
        cols.map(|c| want_rows[r][c].clone().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\t")
    };
    assert_eq!(
        copied,
        json!([
            grouped_reference(duck, "big", decimal, group)[3],
            line(3, 1..=1),
            format!("{}\n{}", line(3, 1..=head.len() - 1), line(4, 0..=2))
        ]),
        "a copy holds DuckDB's text, not the grouped one"
    );
    head
}

/// The profile: DuckDB's counts, extremes and bins over the same rows.
async fn the_profile_is_duckdbs(r: &Round<'_>, head: &Head) {
    let (b, duck, measures) = (&r.b, r.duck, MEASURES);
    let count = |sql: &str| r.count(sql);
    let shot = |name: &str| r.shot(name);
    b.click(".tab[data-tab=\"profile\"]").await;
    let profile = b
        .wait_for(
            "the profile",
            "const rows = [...document.querySelectorAll('#profile-pane .prof-row')];
             return rows.length && [document.getElementById('profile-pane').dataset.rows,
               rows.map(r => ({...r.dataset, type: r.children[1].textContent}))]",
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(profile[0], count(measures));
    let cols = profile[1].as_array().unwrap();
    assert_eq!(cols.len(), head.len());
    for (c, (name, ty)) in head.iter().enumerate() {
        let p = &cols[c];
        let q =
            |sql: &str| duck_text(duck, &sql.replace("{c}", &format!("\"{name}\"")))[0][0].clone();
        assert_eq!(p["type"], ty.as_str(), "{name}");
        assert_eq!(
            p["nulls"].as_str(),
            q("SELECT count(*) - count({c}) FROM measures").as_deref(),
            "{name}: NULLs"
        );
        assert_eq!(
            p["distinct"].as_str(),
            q("SELECT count(DISTINCT {c}) FROM measures").as_deref(),
            "{name}: distinct"
        );
        assert_eq!(
            p["min"].as_str(),
            q("SELECT CAST(min({c}) AS VARCHAR) FROM measures").as_deref(),
            "{name}: min"
        );
        assert_eq!(
            p["max"].as_str(),
            q("SELECT CAST(max({c}) AS VARCHAR) FROM measures").as_deref(),
            "{name}: max"
        );
        bins_or_top_values_are_duckdbs(duck, name, p);
    }
    if let Some(name) = shot("profile") {
        b.screenshot(&name).await;
    }
}

/// A column with bins: DuckDB's histogram over the page's bounds; one
/// without: DuckDB's most frequent values.
fn bins_or_top_values_are_duckdbs(duck: &duckdb::Connection, name: &str, p: &Value) {
    let q = |sql: &str| duck_text(duck, &sql.replace("{c}", &format!("\"{name}\"")))[0][0].clone();
    if let Some(bounds) = p["bounds"].as_str() {
        // DuckDB's histogram over the page's bins (each bin: the
        // values above the previous bound up to its own). The
        // bounds go to DuckDB as the page's text: serde_json's f64
        // parse may land one ulp off (999.9919852379381 read as
        // 999.991985237938), DuckDB's is exact.
        let bounds: Vec<&serde_json::value::RawValue> = serde_json::from_str(bounds).unwrap();
        let counts: Vec<u64> = serde_json::from_str(p["counts"].as_str().unwrap()).unwrap();
        let list = bounds
            .iter()
            .map(|b| format!("'{}'::DOUBLE", b.get()))
            .collect::<Vec<_>>()
            .join(", ");
        let map = q(&format!(
            "SELECT CAST(map_values(histogram(CAST({{c}} AS DOUBLE), [{list}])) AS VARCHAR) FROM measures"
        ))
        .unwrap();
        let want = format!(
            "[{}]",
            counts
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert_eq!(map, want, "{name}: histogram over {bounds:?}");
        assert_eq!(bounds.len(), counts.len());
        assert!(bounds.len() > 1, "{name}: bins");
    } else {
        let top: Vec<(String, u64)> = serde_json::from_str(p["top"].as_str().unwrap()).unwrap();
        let want: Vec<(String, u64)> = duck_text(
            duck,
            &format!(
                "SELECT CAST(\"{name}\" AS VARCHAR), CAST(count(*) AS VARCHAR) FROM measures \
                 WHERE \"{name}\" IS NOT NULL GROUP BY \"{name}\" ORDER BY count(*) DESC, \"{name}\" LIMIT {}",
                top.len().max(1)
            ),
        )
        .into_iter()
        .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap().parse().unwrap()))
        .collect();
        assert_eq!(top, want, "{name}: most frequent values");
    }
}

/// A draft in the editor; then a reload brings back the draft and
/// every tab (its title, SQL, selection, the view it showed).
async fn a_reload_restores_the_draft_and_every_tab(
    r: &Round<'_>,
    head: &Head,
) -> Vec<(u64, bool, String, String)> {
    let (b, duck, reads) = (&r.b, r.duck, READS);
    let draft = "-- a draft, never run\nSELECT month FROM sales_monthly WHERE amount > 300";
    b.set_sql(draft).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let before = b.tab_strip().await;
    b.reload().await;
    assert_eq!(b.sql().await, draft, "the editor's text is restored");
    assert_eq!(b.tab_strip().await, before, "the tabs are restored");
    let view = b
        .wait_for(
            "the profile shown again",
            "const p = document.getElementById('profile-pane');
             return !p.hidden && p.querySelectorAll('.prof-row').length",
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(view, json!(head.len()));
    // Each restored table equals DuckDB's answer.
    b.show_tab(before[0].0).await;
    b.click(".tab[data-tab=\"table\"]").await;
    assert_table_is_on(b, duck, reads).await;
    b.show_tab(before[3].0).await;
    assert_table_is(b, "SELECT upper('tab one') AS first").await;
    before
}

/// Bounded: the stored workspace, the large result kept in part.
async fn a_large_result_is_kept_in_part(
    r: &Round<'_>,
    before: &[(u64, bool, String, String)],
) -> (String, usize) {
    let b = &r.b;
    let grouped = |n: String| r.grouped(n);
    let shot = |name: &str| r.shot(name);
    let stored = b
        .js(
            "return Object.keys(localStorage).map(k => [k, localStorage.getItem(k)])",
            json!([]),
        )
        .await;
    let stored: Vec<(String, String)> = serde_json::from_value(stored).unwrap();
    let (_, doc) = stored
        .iter()
        .find(|(k, _)| *k == workspace_key("first"))
        .expect("the workspace under the identity's hash");
    assert!(doc.len() <= 1_000_000, "{} characters stored", doc.len());
    for (k, v) in &stored {
        assert!(
            !k.contains(TOKEN) && !v.contains(TOKEN),
            "the token is stored"
        );
    }
    let doc: Value = serde_json::from_str(doc).unwrap();
    let large = doc["tabs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["sql"] == LARGE_SQL)
        .unwrap();
    let kept = large["result"]["rows"].as_array().unwrap().len();
    assert!(
        kept > 0 && kept < 300_000,
        "{kept} rows of the large result kept"
    );
    b.show_tab(before[2].0).await;
    let note = b
        .js(
            "const n = document.getElementById('restored');
             return [n.hidden, document.getElementById('restored-text').textContent, document.getElementById('restored-load').textContent]",
            json!([]),
        )
        .await;
    let fmt = |n: usize| grouped(n.to_string());
    assert_eq!(
        note,
        json!([
            false,
            format!(
                "Restored from this browser: the first {} of {} rows (a large result is not kept whole).",
                fmt(kept),
                fmt(300_000)
            ),
            "Load all rows"
        ])
    );
    compare_rows(&duckdb_reference(LARGE_SQL).1, &b.table().await.1);
    if let Some(name) = shot("restored-tabs") {
        b.screenshot(&name).await;
    }
    (large["result"]["id"].as_str().unwrap().to_string(), kept)
}

/// The rest comes from the gateway, which still holds the statement.
async fn the_rest_loads_or_runs_again_on_demand(
    r: &Round<'_>,
    before: &[(u64, bool, String, String)],
    id: &str,
    kept: usize,
) {
    let (b, g) = (&r.b, r.g);
    b.click("#restored-load").await;
    b.wait_for(
        "all rows loaded",
        "return document.getElementById('table-pane').dataset.loaded === '300000' && document.getElementById('restored').hidden",
        Duration::from_secs(60),
    )
    .await;
    // Once the gateway no longer holds it: run again, on demand.
    let (status, _) = g.delete(&format!("/statements/{id}"), TOKEN).await;
    assert_eq!(status, 200);
    b.reload().await;
    b.show_tab(before[2].0).await;
    b.click("#restored-load").await;
    let gone = b
        .wait_for(
            "the marker says the result is gone",
            "const t = document.getElementById('restored-text').textContent;
             return t.includes('no longer holds') && [t, document.getElementById('restored-load').textContent]",
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(gone[1], "Run again", "{gone}");
    assert_eq!(
        b.js(
            "return document.getElementById('table-pane').dataset.loaded",
            json!([])
        )
        .await,
        json!(kept.to_string()),
        "nothing ran unasked"
    );
    b.click("#restored-load").await;
    assert_eq!(b.wait_end().await, "succeeded");
    b.wait_for(
        "the large result run again",
        "return document.getElementById('table-pane').dataset.loaded === '300000'",
        Duration::from_secs(60),
    )
    .await;
}

/// An expired token: the dialog says so, and when.
async fn an_expired_token_is_said_and_a_new_one_carries_on(r: &Round<'_>, issuer: &LocalIssuer) {
    let (b, g) = (&r.b, r.g);
    let shot = |name: &str| r.shot(name);
    b.click("#signout").await;
    let exp = now() + 15;
    b.sign_in(&issuer.mint("carol", &["analyst"], exp)).await;
    let (_, carol) = g
        .get("/whoami", &issuer.mint("carol", &["analyst"], now() + 60))
        .await;
    let shown = b
        .wait_for(
            "the JWT's identity",
            "const n = document.querySelector('#who .who-name');
             return n && n.textContent.startsWith('oidc:') && [n.textContent, [...document.querySelectorAll('#who .who-role')].map(r => r.textContent),
               !!document.querySelector('#who .who-exp')]",
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(shown, json!([carol["name"], carol["roles"], true]));
    // Past its `exp` (no leeway configured), the next run is refused.
    let wait = Duration::from_secs(exp + 1).saturating_sub(Duration::from_secs(now()));
    tokio::time::sleep(wait).await;
    b.set_sql("SELECT 1 AS after_expiry").await;
    b.click("#run").await;
    let said = b
        .wait_for(
            "the expiry in the dialog",
            "const d = document.getElementById('login'); const e = document.getElementById('login-error');
             return d.open && !e.hidden && [e.textContent, e.dataset.slug]",
            Duration::from_secs(20),
        )
        .await;
    let at = b
        .js(
            "return new Date(arguments[0] * 1000).toLocaleTimeString()",
            json!([exp]),
        )
        .await;
    assert_eq!(
        said,
        json!([
            format!(
                "Your token expired at {}. Paste a new one to carry on: your tabs and the editor stay as they are.",
                at.as_str().unwrap()
            ),
            "token-expired"
        ])
    );
    if let Some(name) = shot("expired-token") {
        b.screenshot(&name).await;
    }
    // A new token of the same identity: the same tabs, and it runs.
    let tabs_then = b.tab_strip().await;
    b.keys("#token", &issuer.mint("carol", &["analyst"], now() + 600))
        .await;
    b.click("#connect").await;
    b.wait_for(
        "the dialog closes",
        "return !document.getElementById('login').open",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(b.tab_strip().await, tabs_then);
    assert_eq!(b.run("SELECT 1 AS after_expiry").await, "succeeded");
}

/// Nothing the page asked for was missing (no 404: not the polls,
/// not an icon) and nothing broke but the refused tokens' 401s.
async fn nothing_was_missing_and_nothing_broke(r: &Round<'_>) {
    let b = &r.b;
    let mut asked = Vec::new();
    for e in b.log("performance").await {
        let m: Value =
            serde_json::from_str(e["message"].as_str().unwrap_or("{}")).unwrap_or_default();
        if m["message"]["method"] == "Network.responseReceived" {
            let r = &m["message"]["params"]["response"];
            asked.push((
                r["url"].as_str().unwrap_or("").to_string(),
                r["status"].as_u64().unwrap_or(0),
            ));
        }
    }
    assert!(
        asked
            .iter()
            .any(|(u, s)| u.ends_with("/ui/favicon.svg") && *s == 200),
        "{asked:?}"
    );
    let missing: Vec<_> = asked.iter().filter(|(_, s)| *s == 404).collect();
    assert!(missing.is_empty(), "404s: {missing:?}");
    let severe: Vec<Value> = b
        .log("browser")
        .await
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        .filter(|e| {
            !e["message"]
                .as_str()
                .unwrap_or("")
                .contains("status of 401")
        })
        .collect();
    assert!(severe.is_empty(), "console errors: {severe:?}");
}

/// The browser leaves nothing behind.
fn the_browser_leaves_nothing_behind(b: Browser) {
    let tree = b.processes();
    assert!(!tree.is_empty(), "chromium runs under chromedriver");
    let driver = b.driver.id();
    drop(b);
    let left: Vec<u32> = tree
        .into_iter()
        .chain([driver])
        .filter(|p| alive(*p))
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
}
