//! A PostgreSQL 15 cluster that takes TLS connections only, with a server
//! certificate signed by a CA made for the test (the `openssl` CLI).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Postgres, PG_BIN};

/// Runs `openssl` with `args` in `dir`; fails the test on an error.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A throwaway CA in `dir` (`ca.pem`, `ca.key`) and a certificate it signed
/// for 127.0.0.1 and localhost (`server.crt`, `server.key`).
pub fn make_certificates(dir: &Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca = vec!["req", "-x509", "-nodes", "-days", "2"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-subj",
        "/CN=duckgate test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-new", "-nodes"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
         basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
}

impl Postgres {
    /// Starts a cluster like [`Postgres::start`] whose server speaks TLS
    /// only: `ssl = on` with a certificate for 127.0.0.1 and localhost
    /// signed by a throwaway CA, and `hostssl` the only TCP line of
    /// pg_hba.conf (a plain connection is refused). Returns the cluster
    /// and the CA's PEM file.
    pub fn start_tls(password: &str, database: &str) -> (Postgres, PathBuf) {
        let mut ca = PathBuf::new();
        let pg = Postgres::start_with(password, database, |data| {
            let certs = data
                .parent()
                .expect("the cluster's directory")
                .join("certs");
            std::fs::create_dir(&certs).unwrap();
            make_certificates(&certs);
            for f in ["server.crt", "server.key"] {
                std::fs::copy(certs.join(f), data.join(f)).unwrap();
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                data.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
            let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
            conf.push_str(
                "\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
            );
            std::fs::write(data.join("postgresql.conf"), conf).unwrap();
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all scram-sha-256\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
            )
            .unwrap();
            ca = certs.join("ca.pem");
        });
        (pg, ca)
    }

    /// Runs `sql` in `database` as `duckgate` (over TLS where the server
    /// offers it); its unaligned output.
    pub fn psql(&self, password: &str, database: &str, sql: &str) -> String {
        let out = Command::new(Path::new(PG_BIN).join("psql"))
            .env("PGPASSWORD", password)
            .env("PGSSLMODE", "prefer")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "duckgate", "-d", database, "-q", "-At", "-F", "|"])
            .arg("-c")
            .arg(sql)
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}
