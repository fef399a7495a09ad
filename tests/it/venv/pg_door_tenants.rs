//! The tenant corpus and the guard's refusals replayed through the
//! PostgreSQL door (issue 58): what `core::tenant_channels`,
//! `core::policies`, `venv::oidc` and `venv::guard_corpus` check over HTTP,
//! checked by what psycopg and psql see. On an operator's database made here
//! by DuckDB in-process:
//! - `acme` (a query token over SCRAM) reads the orders of tenant `acme`
//!   through a filter that stays above the scan (`lower(tenant) = 'acme'`)
//!   and the customers with `phone` masked; OIDC JWTs of role `tenant`
//!   (cleartext passwords inside TLS) read their `tenant` claim's orders;
//!   `bob` holds no role (the control: his answers are the whole table's).
//!   Every answer, in the simple protocol and the extended one's text and
//!   binary formats, is Python DuckDB's over a database holding exactly
//!   the identity's rows (an error only hidden rows would raise included);
//! - a hidden table, view or index answers exactly as a missing name does
//!   (`42P01`, the same message and position), in every spelling;
//! - the guard's refusals are `42501` (a multi-statement simple query stops
//!   at the refused one, psql's caret under DuckDB's place in the whole text);
//! - `pg_catalog` and `information_schema` list only what the identity may
//!   read, as psql's `\dt` does; so do the keys psql's `\d table`,
//!   SQLAlchemy's `get_pk_constraint` and `pg_constraint` show;
//! - a JWT is never taken outside TLS; an expired or wrong one is `28P01`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::oidc::{Issuer, AUDIENCE};
use super::pg_door::{certificates, pg_addr, pgjdbc, PRELUDE};
use crate::common::{python, App, Gateway};

const ACME: &str = "acme-pg-token-0123456789abcdef";
const BOB: &str = "bob-pg-token-0123456789abcdef01";

const ROLES: &str = r#"
[[role]]
name = "acme"
members = ["acme"]
read = ["ops.main.orders", "ops.main.regions", "ops.main.customers", "ops.main.shipments", "ops.main.calls"]
[role.rows]
"ops.main.orders" = "lower(tenant) = 'acme'"
[role.masks."ops.main.customers"]
phone = "'***'"

[[role]]
name = "tenant"
read = ["ops.main.orders", "ops.main.regions", "ops.main.customers", "ops.main.shipments", "ops.main.calls"]
[role.rows]
"ops.main.orders" = "tenant = claim('tenant')"
[role.masks."ops.main.customers"]
phone = "'***'"
"#;

/// The tables every confined identity here may read.
const GRANTED: &[&str] = &["calls", "customers", "orders", "regions", "shipments"];
/// Objects of the database no role grants.
const HIDDEN: &[&str] = &["secret_stuff", "constants", "all_orders"];

/// The operator's database, made by DuckDB: orders of three tenants whose
/// notes are numbers for `acme` only (a cast of another tenant's fails),
/// regions (a primary key and a unique column), customers with phones (a
/// primary key of two columns), shipments (a CHECK constraint, foreign
/// keys to regions and to the hidden table), calls (a foreign key of two columns to customers), a
/// table (with its own keys), two views, an index and a sequence no role
/// grants.
fn operator_database(path: &Path) {
    let conn = duckdb::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE orders AS SELECT i AS id,
                ['acme', 'globex', 'initech'][i % 3 + 1] AS tenant,
                (i * 7919) % 3000 AS amount,
                CASE WHEN i % 3 = 0 THEN CAST(i AS VARCHAR) ELSE 'boom' END AS note,
                DATE '2024-01-01' + (i % 400)::INTEGER AS placed
            FROM range(3000) t(i);
         CREATE TABLE regions(id BIGINT PRIMARY KEY, region VARCHAR UNIQUE);
         INSERT INTO regions SELECT i AS id, 'r' || i AS region FROM range(10) t(i);
         CREATE TABLE customers(id BIGINT, name VARCHAR, phone VARCHAR, PRIMARY KEY (name, id));
         INSERT INTO customers SELECT i AS id, 'name ' || i AS name,
                '+1-555-' || lpad(i::VARCHAR, 4, '0') AS phone FROM range(20) t(i);
         CREATE TABLE secret_stuff(x INTEGER PRIMARY KEY, y VARCHAR);
         INSERT INTO secret_stuff VALUES (42, 'hidden');
         CREATE TABLE shipments(id BIGINT PRIMARY KEY CHECK (id > 0), region BIGINT REFERENCES regions(id),
                region_name VARCHAR REFERENCES regions(region), secret INTEGER REFERENCES secret_stuff(x));
         CREATE TABLE calls(placed TIMESTAMP, name VARCHAR, cid BIGINT,
                FOREIGN KEY (name, cid) REFERENCES customers(name, id));
         CREATE VIEW constants AS SELECT 42 AS answer;
         CREATE VIEW all_orders AS SELECT * FROM orders;
         CREATE INDEX regions_by_name ON regions(region);
         CREATE INDEX secret_by_y ON secret_stuff(y);
         CREATE SEQUENCE secret_seq;",
    )
    .unwrap();
}

struct Door {
    app: App,
    port: String,
    reference: PathBuf,
    dir: tempfile::TempDir,
    issuer: Option<Issuer>,
    ca: Option<PathBuf>,
}

/// A gateway over the operator's database with the door on a free port;
/// `tls`: with a certificate and an OIDC issuer.
async fn door(tls: bool) -> Door {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.duckdb");
    operator_database(&db);
    let reference = dir.path().join("reference.duckdb");
    std::fs::copy(&db, &reference).unwrap();
    let roles = dir.path().join("roles.toml");
    std::fs::write(&roles, ROLES).unwrap();
    let mut b = Gateway::builder()
        .env("DUCKGATE_PG_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_DATABASE", db.display())
        .env("DUCKGATE_CONFIG", roles.display())
        .env("DUCKGATE_QUERY_TOKENS", format!("acme:{ACME},bob:{BOB}"));
    let (mut issuer, mut ca) = (None, None);
    if tls {
        let (ca_pem, cert, key) = certificates(dir.path());
        let i = Issuer::start();
        b = b
            .env("DUCKGATE_PG_TLS_CERT", cert.display())
            .env("DUCKGATE_PG_TLS_KEY", key.display())
            .env("DUCKGATE_OIDC_ISSUER", &i.base)
            .env("DUCKGATE_OIDC_AUDIENCE", AUDIENCE);
        issuer = Some(i);
        ca = Some(ca_pem);
    }
    let app = b.spawn_app().await;
    let addr = pg_addr(&app).await;
    let port = addr.rsplit(':').next().unwrap_or_default().to_string();
    Door {
        app,
        port,
        reference,
        dir,
        issuer,
        ca,
    }
}

impl Door {
    /// A libpq connection string over plain TCP.
    fn dsn(&self, user: &str, password: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} password={password} dbname=ops sslmode=disable",
            self.port
        )
    }

    /// A libpq connection string inside TLS, the certificate verified.
    fn tls_dsn(&self, password: &str) -> String {
        format!(
            "host=localhost port={} user=whoever password={password} dbname=ops sslmode=verify-full sslrootcert={}",
            self.port,
            self.ca.as_ref().unwrap().display()
        )
    }

    /// Runs `script` after the prelude (`DSN`, the reference, `ARGS`); its
    /// last line as JSON.
    fn run(&self, script: &str, args: &[&str]) -> Value {
        let reference = self.reference.to_str().unwrap();
        let mut all = vec!["", reference];
        all.extend_from_slice(args);
        let out = python(&format!("{PRELUDE}\n{CORPUS}\n{script}"), &all);
        let last = out.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// A JWT of the issuer for `tenant` (role `tenant`), expiring in
    /// `expires_in` seconds (negative: expired).
    async fn jwt(&self, tenant: &str, expires_in: i64) -> String {
        let issuer = self.issuer.as_ref().unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let claims = json!({
            "iss": issuer.base, "aud": AUDIENCE, "sub": format!("user-of-{tenant}"),
            "iat": now - 600, "exp": now + expires_in,
            "roles": ["tenant"], "tenant": tenant,
        });
        issuer.mint("rsa-1", "RS256", claims).await
    }
}

/// The corpus each identity runs, and how its answer is checked: against
/// DuckDB over a database holding only that identity's rows (`confined`),
/// through every protocol psycopg speaks.
const CORPUS: &str = r#"
import psycopg

QUERIES = [
    ("SELECT count(*), sum(amount), min(placed), max(placed) FROM orders", ()),
    ("SELECT tenant, count(*) AS n, sum(amount) AS s FROM orders GROUP BY ALL ORDER BY ALL", ()),
    ("SELECT id FROM orders ORDER BY amount, id LIMIT 100", ()),
    ("SELECT count(*) FROM orders o JOIN (SELECT v FROM range(0, 300) r(v)) r ON o.amount = r.v", ()),
    ("SELECT r.region, count(*) FROM orders o JOIN regions r ON o.id % 10 = r.id GROUP BY ALL ORDER BY ALL", ()),
    ("SELECT id, amount, sum(amount) OVER (ORDER BY id) AS running FROM orders ORDER BY id LIMIT 50", ()),
    ("WITH orders AS (SELECT * FROM main.orders WHERE amount < 1000) SELECT count(*) FROM orders", ()),
    ("SELECT count(*) FROM ops.main.orders WHERE id IN (SELECT id FROM orders WHERE amount > 1500)", ()),
    ("SELECT tenant FROM orders UNION SELECT 'x' ORDER BY 1", ()),
    ("SELECT max(id) FROM orders WHERE EXISTS (SELECT 1 FROM orders o2 WHERE o2.id = orders.id + 1)", ()),
    # An error only other tenants' rows raise: acme's notes are numbers.
    ("SELECT sum(CAST(note AS INTEGER)) FROM orders", ()),
    ("SELECT id, name, phone FROM customers ORDER BY id", ()),
    ("SELECT count(DISTINCT phone), min(phone) FROM customers", ()),
    ("SELECT count(*), sum(amount) FROM orders WHERE amount > %s AND tenant <> %s", (1000, "zz")),
    ("SELECT id, placed FROM orders WHERE placed BETWEEN %s AND %s ORDER BY id LIMIT 20",
     (datetime.date(2024, 2, 1), datetime.date(2024, 3, 1))),
]

def confined(rows_filter, mask):
    """DuckDB over a database holding exactly what the identity reads."""
    c = duckdb.connect()
    c.execute("ATTACH ':memory:' AS ops")
    c.execute("USE ops")
    c.execute(f"ATTACH '{REFERENCE}' AS src (READ_ONLY)")
    c.execute(f"CREATE TABLE orders AS SELECT * FROM src.orders WHERE {rows_filter}")
    c.execute("CREATE TABLE regions AS SELECT * FROM src.regions")
    phone = "'***'" if mask else "phone"
    c.execute(f"CREATE TABLE customers AS SELECT id, name, {phone} AS phone FROM src.customers")
    return c

def sqlstate_of(e):
    return {"ConversionException": "22P02", "InvalidInputException": "22P02",
            "CatalogException": "42P01"}.get(type(e).__name__, type(e).__name__)

def outcome_ref(c, q, p):
    try:
        return ["rows", rows(c.execute(q.replace("%s", "?"), list(p)).fetchall())]
    except duckdb.Error as e:
        return ["error", sqlstate_of(e)]

def outcome(cur, q, p):
    try:
        cur.execute(q, p or None)
        return ["rows", rows(cur.fetchall())]
    except psycopg.Error as e:
        return ["error", e.sqlstate]

def replay(dsn, rows_filter, mask):
    """The corpus through the simple protocol and the extended one's text
    and binary formats; the mismatches, and the outcomes by query."""
    want = confined(rows_filter, mask)
    bad, seen = [], {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursors = {"simple": psycopg.ClientCursor(conn), "text": conn.cursor(), "binary": conn.cursor(binary=True)}
        for q, p in QUERIES:
            w = outcome_ref(want, q, p)
            seen[q] = w
            for name, cur in cursors.items():
                got = outcome(cur, q, p)
                if got != w:
                    bad.append({"protocol": name, "sql": q, "got": str(got)[:300], "want": str(w)[:300]})
    return bad, seen
"#;

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, psycopg); scripts/test installs it"]
async fn a_confined_identity_reads_duckdbs_answer_over_only_its_rows() {
    let d = door(false).await;
    let v = d.run(
        r#"
acme, acme_seen = replay(ARGS[0], "lower(tenant) = 'acme'", True)
bob, bob_seen = replay(ARGS[1], "true", False)
q = "SELECT count(*), sum(amount), min(placed), max(placed) FROM orders"
done(acme=acme, bob=bob, acme_count=acme_seen[q], bob_count=bob_seen[q],
     acme_cast=acme_seen["SELECT sum(CAST(note AS INTEGER)) FROM orders"][0],
     bob_cast=bob_seen["SELECT sum(CAST(note AS INTEGER)) FROM orders"])
"#,
        &[&d.dsn("acme", ACME), &d.dsn("bob", BOB)],
    );
    assert_eq!(v["acme"], json!([]), "{v}");
    assert_eq!(v["bob"], json!([]), "{v}");
    // The controls: the filter takes rows away, and the cast that acme's
    // rows pass fails on the rows it hides.
    assert_ne!(v["acme_count"], v["bob_count"], "{v}");
    assert_eq!(v["acme_cast"], "rows", "{v}");
    assert_eq!(v["bob_cast"], json!(["error", "22P02"]), "{v}");
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, psycopg, PyJWT, cryptography); scripts/test installs it"]
async fn jwts_inside_tls_read_their_tenants_rows_and_never_travel_in_the_open() {
    let d = door(true).await;
    let acme = d.jwt("acme", 300).await;
    let globex = d.jwt("globex", 300).await;
    let expired = d.jwt("acme", -120).await;
    let v = d.run(
        r#"
A, G, EXPIRED, PLAIN_A, PORT = ARGS
acme, _ = replay(A, "tenant = 'acme'", True)
globex, seen = replay(G, "tenant = 'globex'", True)
def refused(dsn):
    try:
        psycopg.connect(dsn).close()
        return None
    except psycopg.OperationalError as e:
        return str(e)
token = A.split("password=")[1].split()[0]
expired_token = EXPIRED.split("password=")[1].split()[0]
done(acme=acme, globex=globex,
     globex_cast=seen["SELECT sum(CAST(note AS INTEGER)) FROM orders"],
     expired=refused(EXPIRED),
     plain=refused(PLAIN_A),
     expired_state=connect_error(int(PORT), "whoever", expired_token, ssl="require"),
     plain_state=connect_error(int(PORT), "whoever", token, ssl=False),
     tls_state=connect_error(int(PORT), "whoever", token, ssl="require"))
"#,
        &[
            &d.tls_dsn(&acme),
            &d.tls_dsn(&globex),
            &d.tls_dsn(&expired),
            &d.dsn("whoever", &acme),
            &d.port,
        ],
    );
    // Each JWT's tenant claim binds its row filter; the answers are
    // DuckDB's over that tenant's rows, in every protocol.
    assert_eq!(v["acme"], json!([]), "{v}");
    assert_eq!(v["globex"], json!([]), "{v}");
    assert_eq!(v["globex_cast"], json!(["error", "22P02"]), "{v}");
    // Outside TLS a JWT is refused (SCRAM knows no JWT), inside it works,
    // an expired one is refused: 28P01, the token in no message.
    assert_eq!(v["tls_state"], Value::Null, "{v}");
    assert_eq!(v["plain_state"], "28P01", "{v}");
    assert_eq!(v["expired_state"], "28P01", "{v}");
    for case in ["plain", "expired"] {
        let msg = v[case].as_str().unwrap_or_default();
        assert!(
            msg.contains("password authentication failed"),
            "{case}: {v}"
        );
        assert!(!msg.contains(&acme) && !msg.contains(&expired), "{v}");
    }
    let log = d.app.log_text();
    for token in [&acme, &globex, &expired] {
        let signature = token.rsplit('.').next().unwrap();
        assert!(!log.contains(signature), "a JWT reached the log");
    }
}

/// psql with `args` as `user`; stdout and stderr.
fn psql(d: &Door, user: &str, password: &str, args: &[&str]) -> (String, String) {
    let out = Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={} user={user} dbname=ops sslmode=disable",
            d.port
        ))
        .args(["-X", "-v", "ON_ERROR_STOP=0"])
        .args(args)
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .current_dir(d.dir.path())
        .output()
        .expect("psql (Debian's postgresql-client; scripts/test-env installs it)");
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
#[ignore = "tier venv: needs psql and the test venv (psycopg); scripts/test installs them"]
async fn hidden_objects_answer_as_missing_ones_and_refusals_are_42501() {
    let d = door(false).await;
    let v = d.run(
        r#"
HIDDEN = json.loads(ARGS[1])
SPELLINGS = ["SELECT * FROM {t}", "select x from main.{t}", "SELECT count(*) FROM ops.main.{t} AS s",
             "SELECT 1 FROM orders JOIN {t} ON true", "WITH c AS (SELECT * FROM \"{t}\") SELECT * FROM c",
             "SELECT * FROM orders WHERE id IN (SELECT 1 FROM {t})"]
def error_of(cur, q, p=()):
    try:
        cur.execute(q, p or None)
        cur.fetchall()
        return None
    except psycopg.Error as e:
        return [e.sqlstate, e.diag.message_primary, e.diag.message_detail, e.diag.statement_position]
hidden = []
with psycopg.connect(ARGS[0], autocommit=True) as conn:
    for name in HIDDEN:
        missing = "no_such_" + "x" * (len(name) - 8)  # as long as the name: the same position
        for s in SPELLINGS:
            for cur in (psycopg.ClientCursor(conn), conn.cursor()):
                got = error_of(cur, s.format(t=name))
                want = error_of(cur, s.format(t=missing))
                got = got and [g.replace(name, "<t>") if isinstance(g, str) else g for g in got]
                want = want and [w.replace(missing, "<t>") if isinstance(w, str) else w for w in want]
                if got != want or not got or got[0] != "42P01":
                    hidden.append({"sql": s.format(t=name), "got": got, "want": want})
    # The guard's refusals, in the spellings of its corpus.
    REFUSED = [
        "CREATE SECRET evil (TYPE s3, KEY_ID 'x', SECRET 'y')",
        "cReAtE /* a comment */ oR rEpLaCe SeCrEt duckgate_s3 (TYPE s3)",
        "ATTACH 'elsewhere.db' AS e",
        "LOAD httpfs",
        "INSTALL httpfs",
        "SET threads = 1",
        "PRAGMA threads = 1",
        "CHECKPOINT",
        "SELECT current_setting('threads')",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM duckdb_secrets()",
        "SELECT getenv('HOME')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT content FROM read_text('/etc/shadow')",
        "SELECT * FROM glob('/*')",
        "INSERT INTO orders VALUES (1, 'acme', 1, '1', DATE '2024-01-01')",
        "DELETE FROM orders",
        "DROP TABLE orders",
        "CREATE TABLE mine AS SELECT 1",
        "SELECT rowid FROM orders",
        "EXPLAIN SELECT * FROM orders",
        "EXPLAIN ANALYZE SELECT count(*) FROM orders",
        "SELECT * FROM duckdb_constraints()",
    ]
    refused = {}
    for q in REFUSED:
        for name, cur in (("simple", psycopg.ClientCursor(conn)), ("extended", conn.cursor())):
            e = error_of(cur, q)
            if e is None or e[0] != "42501" or "root:" in str(e):
                refused[name + ": " + q] = e
    # The connection serves the next statement after every refusal.
    after = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
done(hidden=hidden, refused=refused, after=after)
"#,
        &[&d.dsn("acme", ACME), &serde_json::to_string(HIDDEN).unwrap()],
    );
    assert_eq!(v["hidden"], json!([]), "{v}");
    assert_eq!(v["refused"], json!({}), "{v}");
    assert_eq!(v["after"], 1000, "{v}");
    // A simple query of several statements stops at the refused one; psql
    // draws its caret under DuckDB's place in the whole text.
    let (out, err) = psql(
        &d,
        "acme",
        ACME,
        &[
            "-A",
            "-t",
            "-c",
            "SELECT 7; SELECT * FROM secret_stuff; SELECT 8",
        ],
    );
    assert_eq!(out.trim(), "7", "{out}{err}");
    assert!(err.contains("does not exist"), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("LINE 1:"))
        .unwrap_or_default();
    let caret = err
        .lines()
        .skip_while(|l| !l.starts_with("LINE 1:"))
        .nth(1)
        .unwrap_or_default();
    let at = caret.find('^').unwrap_or_else(|| panic!("no caret: {err}"));
    assert!(line[at..].starts_with("secret_stuff"), "{err}");
    let (out, err) = psql(
        &d,
        "acme",
        ACME,
        &[
            "-A",
            "-t",
            "-c",
            "SELECT 7; CREATE SECRET s (TYPE s3); SELECT 8",
        ],
    );
    assert_eq!(out.trim(), "7", "{out}{err}");
    assert!(err.contains("Statement not allowed"), "{err}");
}

#[tokio::test]
#[ignore = "tier venv: needs psql and the test venv (psycopg); scripts/test installs them"]
async fn catalogs_list_only_what_the_identity_may_read() {
    let d = door(false).await;
    let v = d.run(
        r#"
GRANTED, HIDDEN = json.loads(ARGS[2]), json.loads(ARGS[3])
LISTINGS = {
    "tables": "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1",
    "columns": "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'main' ORDER BY 1, 2",
    "pg_class": "SELECT relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'main' ORDER BY 1",
    "pg_attribute": "SELECT c.relname, a.attname FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON a.attrelid = c.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'main' AND a.attnum > 0 ORDER BY 1, 2",
    "pg_namespace": "SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname = 'main'",
    "pg_tables": "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = 'main' ORDER BY 1",
}
def listings(dsn):
    out = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for k, q in LISTINGS.items():
            try:
                out[k] = [list(r) for r in conn.execute(q).fetchall()]
            except psycopg.Error as e:
                out[k] = ["error", e.sqlstate, str(e).splitlines()[0]]
    return out
# DuckDB's own listings of the granted tables (names only: the gateway's
# database is attached under its own name).
want = {}
for k, q in LISTINGS.items():
    got = [list(r) for r in ref.execute(q).fetchall()]
    if k in ("tables", "columns", "pg_class", "pg_attribute", "pg_tables"):
        got = [r for r in got if r[0] in GRANTED]
    want[k] = got
done(acme=listings(ARGS[0]), bob=listings(ARGS[1]), want=want)
"#,
        &[
            &d.dsn("acme", ACME),
            &d.dsn("bob", BOB),
            &serde_json::to_string(GRANTED).unwrap(),
            &serde_json::to_string(HIDDEN).unwrap(),
        ],
    );
    for listing in [
        "tables",
        "columns",
        "pg_class",
        "pg_attribute",
        "pg_namespace",
        "pg_tables",
    ] {
        let got = &v["acme"][listing];
        let text = got.to_string();
        for hidden in HIDDEN.iter().chain(&["secret_by_y", "secret_seq"]) {
            assert!(
                !text.contains(hidden),
                "{listing} shows {hidden} to acme: {got}"
            );
        }
        if listing != "pg_class" {
            assert_eq!(got, &v["want"][listing], "{listing}: {v}");
        }
        // The control: bob, holding no role, sees the hidden table.
        if listing != "pg_namespace" {
            assert!(
                v["bob"][listing].to_string().contains("secret_stuff"),
                "{listing}: {v}"
            );
        }
    }
    // pg_class lists the granted tables (and what DuckDB lists with them
    // that the identity may see: the granted table's index).
    let pg_class: Vec<&str> = v["acme"]["pg_class"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .filter_map(|r| r[0].as_str())
        .collect();
    for t in GRANTED {
        assert!(pg_class.contains(t), "{t} not in {pg_class:?}");
    }
    // psql's \dt: the granted tables, nothing hidden.
    let (out, err) = psql(&d, "acme", ACME, &["-c", "\\dt"]);
    for t in GRANTED {
        assert!(out.contains(t), "{out}{err}");
    }
    assert!(!out.contains("secret_stuff"), "{out}");
}

#[tokio::test]
#[ignore = "tier venv: needs psql and the test venv (psycopg, SQLAlchemy 2); scripts/test installs them"]
async fn keys_are_duckdbs_and_only_those_of_tables_the_identity_may_read() {
    let d = door(false).await;
    let url = |user: &str, token: &str| {
        format!(
            "postgresql+psycopg://{user}:{token}@127.0.0.1:{}/ops?sslmode=disable",
            d.port
        )
    };
    let v = d.run(
        r#"
import sqlalchemy as sa
GRANTED, HIDDEN = json.loads(ARGS[4]), json.loads(ARGS[5])
CONSTRAINTS = """SELECT c.relname, con.conname, con.contype, con.conkey
    FROM pg_catalog.pg_constraint con JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
    ORDER BY 1, 2"""
def door(dsn, url):
    out = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        out["pg_constraint"] = [list(r) for r in conn.execute(CONSTRAINTS).fetchall()]
    insp = sa.inspect(sa.create_engine(url))
    for t in GRANTED + HIDDEN[:1] + ["no_such_table"]:
        try:
            pk = insp.get_pk_constraint(t)
            uq = insp.get_unique_constraints(t)
            fk = insp.get_foreign_keys(t)
            ck = insp.get_check_constraints(t)
            out[t] = {"pk": [pk["name"], pk["constrained_columns"]],
                      "unique": sorted([u["name"], u["column_names"]] for u in uq),
                      "foreign": sorted([f["name"], f["constrained_columns"], f["referred_table"],
                                         f["referred_columns"]] for f in fk),
                      # SQLAlchemy's text of a CHECK is what it found inside DuckDB's.
                      "check": sorted([c["name"], c["sqltext"] in checks[c["name"]]] for c in ck)}
        except sa.exc.NoSuchTableError as e:
            out[t] = "missing"
    return out
# DuckDB's own keys, with PostgreSQL's column numbers (from 1).
keys = [list(r) for r in ref.execute("""
    SELECT table_name, constraint_name,
           CASE constraint_type WHEN 'PRIMARY KEY' THEN 'p' WHEN 'UNIQUE' THEN 'u'
                WHEN 'CHECK' THEN 'c' ELSE 'f' END,
           list_transform(constraint_column_indexes, lambda i: i + 1), constraint_column_names,
           referenced_table, referenced_column_names
    FROM duckdb_constraints() WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY', 'CHECK')
    ORDER BY 1, 2""").fetchall()]
checks = dict(ref.execute("""SELECT constraint_name, constraint_text FROM duckdb_constraints()
    WHERE constraint_type = 'CHECK'""").fetchall())
def want(tables):
    # A foreign key shows only where its referenced table does too.
    seen = [k for k in keys if k[0] in tables and (k[2] != "f" or k[5] in tables)]
    # conkey is a list of integers: DuckDB's text of it (docs/postgres.md "Types").
    out = {"pg_constraint": [k[:3] + [str(k[3])] for k in seen]}
    for t in GRANTED + HIDDEN[:1] + ["no_such_table"]:
        if t not in tables and t != "no_such_table" and t in GRANTED + HIDDEN:
            out[t] = "missing"
            continue
        mine = [k for k in seen if k[0] == t]
        pk = [[k[1], k[4]] for k in mine if k[2] == "p"]
        out[t] = {"pk": pk[0] if pk else [None, []],
                  "unique": sorted([k[1], k[4]] for k in mine if k[2] == "u"),
                  "foreign": sorted([k[1], k[4], k[5], k[6]] for k in mine if k[2] == "f"),
                  "check": sorted([k[1], True] for k in mine if k[2] == "c")} if t != "no_such_table" else "missing"
    return out
all_tables = [r[0] for r in ref.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
done(acme=door(ARGS[0], ARGS[1]), bob=door(ARGS[2], ARGS[3]), want_acme=want(GRANTED), want_bob=want(all_tables))
"#,
        &[
            &d.dsn("acme", ACME),
            &url("acme", ACME),
            &d.dsn("bob", BOB),
            &url("bob", BOB),
            &serde_json::to_string(GRANTED).unwrap(),
            &serde_json::to_string(HIDDEN).unwrap(),
        ],
    );
    assert_eq!(v["acme"], v["want_acme"], "{v}");
    assert_eq!(v["bob"], v["want_bob"], "{v}");
    // The control: the hidden table has keys, which bob sees.
    assert!(v["bob"].to_string().contains("secret_stuff"), "{v}");
    assert!(!v["acme"].to_string().contains("secret_stuff_x"), "{v}");
    // psql's \d: the keys under "Indexes", named as DuckDB names them; a
    // hidden table's \d is a missing one's.
    let (out, err) = psql(&d, "acme", ACME, &["-c", "\\d regions"]);
    let keys = v["want_acme"]["regions"].clone();
    let pk = keys["pk"][0].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(
        out.contains(&format!("\"{pk}\" PRIMARY KEY, art (id)")),
        "{out}{err}"
    );
    let unique = keys["unique"][0][0]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    assert!(
        out.contains(&format!("\"{unique}\" UNIQUE CONSTRAINT, art (region)")),
        "{out}{err}"
    );
    let (_, hidden) = psql(&d, "acme", ACME, &["-c", "\\d secret_stuff"]);
    let (_, missing) = psql(&d, "acme", ACME, &["-c", "\\d secret_stuffz"]);
    assert_eq!(
        hidden.replace("secret_stuff", "X"),
        missing.replace("secret_stuffz", "X")
    );
    assert!(hidden.contains("Did not find"), "{hidden}");
    // Foreign keys: psql's `\d` lists them under "Foreign-key constraints"
    // and "Referenced by" in DuckDB's own text of them; acme's lack the
    // one that references the hidden table, which bob (the control) sees.
    let fks: Vec<(String, String, String, String)> = serde_json::from_str(&python(
        r#"
import duckdb, json, sys
c = duckdb.connect(sys.argv[1], read_only=True)
print(json.dumps(c.execute("""SELECT table_name, constraint_name, constraint_text, referenced_table
    FROM duckdb_constraints() WHERE constraint_type = 'FOREIGN KEY' ORDER BY ALL""").fetchall()))
"#,
        &[d.reference.to_str().unwrap()],
    ))
    .unwrap();
    assert_eq!(fks.len(), 4, "{fks:?}");
    for (user, token) in [("acme", ACME), ("bob", BOB)] {
        let (shipments, err) = psql(&d, user, token, &["-c", "\\d shipments"]);
        let (regions, _) = psql(&d, user, token, &["-c", "\\d regions"]);
        for (table, name, text, referenced) in &fks {
            let line = format!("\"{name}\" {text}");
            let shown = user == "bob" || GRANTED.contains(&referenced.as_str());
            if table == "shipments" {
                assert_eq!(
                    shipments.contains(&line),
                    shown,
                    "{user}: {line}\n{shipments}{err}"
                );
            }
            if referenced == "regions" {
                let by = format!("TABLE \"{table}\" CONSTRAINT {line}");
                assert!(regions.contains(&by), "{user}: {by}\n{regions}");
            }
        }
        assert!(
            shipments.contains("Foreign-key constraints:"),
            "{shipments}"
        );
        // Its CHECK constraint, in DuckDB's text of it.
        let check = python(
            r#"
import duckdb, sys
c = duckdb.connect(sys.argv[1], read_only=True)
print(c.execute("""SELECT '"' || constraint_name || '" ' || constraint_text FROM duckdb_constraints()
    WHERE constraint_type = 'CHECK' AND table_name = 'shipments'""").fetchone()[0])
"#,
            &[d.reference.to_str().unwrap()],
        );
        assert!(shipments.contains("Check constraints:"), "{shipments}");
        assert!(shipments.contains(check.trim()), "{check}\n{shipments}");
    }
    // pgjdbc's getImportedKeys and getExportedKeys (DBeaver's and
    // Metabase's foreign keys), against DuckDB's. pgjdbc reads
    // `max_index_keys` from `pg_settings`, which the door answers with
    // PostgreSQL's constant and nothing of DuckDB's settings (the guard
    // refuses those: `duckdb_settings()` among the refusals above).
    let (settings, err) = psql(
        &d,
        "acme",
        ACME,
        &[
            "-At",
            "-c",
            "SELECT name, setting FROM pg_catalog.pg_settings",
        ],
    );
    assert_eq!(settings.trim(), "max_index_keys|32", "{err}");
    for (user, token) in [("acme", ACME), ("bob", BOB)] {
        let got = pgjdbc(d.dir.path(), "Fks", JDBC_KEYS, &d.port, user, token);
        let tables: Vec<&str> = if user == "bob" {
            GRANTED
                .iter()
                .chain(HIDDEN.iter().take(1))
                .copied()
                .collect()
        } else {
            GRANTED.to_vec()
        };
        let want = python(
            JDBC_KEYS_REFERENCE,
            &[
                d.reference.to_str().unwrap(),
                &serde_json::to_string(&tables).unwrap(),
            ],
        );
        assert_eq!(got, want, "{user}");
        assert_eq!(got.contains("secret_stuff"), user == "bob", "{user}: {got}");
    }
}

/// pgjdbc's foreign keys of every table a test names, one line per column.
const JDBC_KEYS: &str = r#"
import java.sql.*;
public class Fks {
  public static void main(String[] a) throws Exception {
    String url = "jdbc:postgresql://127.0.0.1:" + a[0] + "/ops?sslmode=disable";
    try (Connection c = DriverManager.getConnection(url, a[1], a[2])) {
      DatabaseMetaData md = c.getMetaData();
      for (String t : new String[]{"calls", "customers", "regions", "shipments", "secret_stuff"}) {
        for (String kind : new String[]{"imported", "exported"}) {
          ResultSet r = kind.equals("imported") ? md.getImportedKeys(null, "main", t) : md.getExportedKeys(null, "main", t);
          while (r.next()) {
            System.out.println(kind + "|" + t + "|" + r.getString("PKTABLE_NAME") + "|" + r.getString("PKCOLUMN_NAME")
              + "|" + r.getString("FKTABLE_NAME") + "|" + r.getString("FKCOLUMN_NAME") + "|" + r.getInt("KEY_SEQ")
              + "|" + r.getString("FK_NAME") + "|" + r.getString("PK_NAME"));
          }
        }
      }
    }
  }
}
"#;

/// The same lines from DuckDB's `duckdb_constraints()`: a foreign key of
/// the tables in `ARGS[1]` whose referenced table is among them too, each
/// column with its place, and the name of the key it references.
const JDBC_KEYS_REFERENCE: &str = r#"
import duckdb, json, sys
c = duckdb.connect(sys.argv[1], read_only=True)
tables = json.loads(sys.argv[2])
rows = c.execute("""SELECT table_name, constraint_type, constraint_name, constraint_column_names,
    referenced_table, referenced_column_names FROM duckdb_constraints()
    WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY')""").fetchall()
keys = {(t, tuple(cols)): name for t, kind, name, cols, _, _ in rows if kind != "FOREIGN KEY"}
fks = sorted((t, name, cols, rt, rcols) for t, kind, name, cols, rt, rcols in rows
             if kind == "FOREIGN KEY" and t in tables and rt in tables)
for t in ["calls", "customers", "regions", "shipments", "secret_stuff"]:
    if t not in tables:
        continue
    for kind in ("imported", "exported"):
        # pgjdbc orders by the referenced table, the key's name and place.
        mine = [f for f in fks if (f[0] if kind == "imported" else f[3]) == t]
        lines = []
        for ft, name, cols, rt, rcols in mine:
            for i, (fc, pc) in enumerate(zip(cols, rcols)):
                order = (rt, name, i) if kind == "imported" else (ft, name, i)
                lines.append((order, f"{kind}|{t}|{rt}|{pc}|{ft}|{fc}|{i + 1}|{name}|{keys[(rt, tuple(rcols))]}"))
        for _, line in sorted(lines):
            print(line)
"#;
