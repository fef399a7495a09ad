//! A connection's session: who it is, the settings drivers send (kept here,
//! never set on a pooled DuckDB connection), the statement running now (for
//! a cancel request), and what each statement text asks of the door:
//! DuckDB's work, or a session command the door answers itself (`SET`,
//! `SHOW`, `BEGIN`, `COMMIT`, `DISCARD`, `COPY ... TO STDOUT`).

mod command;
mod scan;
mod settings;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::pg::backend::{Identity, Running, Started};
use crate::pg::errors::{self, code};

pub use command::{classify, Answer, Command, Copy};
pub use scan::split;
pub use settings::{duration_ms, setting, Setting, REPORTED};

/// One connection's session.
pub struct Session {
    /// Who runs the statements.
    pub identity: Identity,
    /// The settings a client set, by lower-case name.
    settings: Mutex<BTreeMap<String, String>>,
    /// The statement running now, for a cancel request.
    running: Mutex<Option<Arc<Running>>>,
    /// A statement started by a `Describe` of a portal (its columns are
    /// known only once it runs), kept for the `Execute` that follows: the
    /// portal's address and the started statement.
    pub pending: tokio::sync::Mutex<Option<(usize, Started)>>,
}

impl Session {
    /// A session for `identity`, with the settings the client's startup
    /// message carried (those the door keeps).
    pub fn new(identity: Identity, startup: &std::collections::HashMap<String, String>) -> Self {
        let session = Session {
            identity,
            settings: Mutex::new(BTreeMap::new()),
            running: Mutex::new(None),
            pending: tokio::sync::Mutex::new(None),
        };
        for (k, v) in startup {
            // A startup option the door does not keep is ignored, as a
            // server ignores options it cannot apply... except that a bad
            // value of one it keeps is refused at its first use.
            if setting(k).is_some() {
                let _ = session.set(k, Some(v));
            }
        }
        session
    }

    /// Sets (or with `None` resets) a setting the door keeps; an error for
    /// a value the door cannot honour.
    pub fn set(&self, name: &str, value: Option<&str>) -> Result<(), pgwire::error::PgWireError> {
        let Some(s) = setting(name) else {
            return Err(errors::error(
                code::UNDEFINED_OBJECT,
                format!("unrecognized configuration parameter \"{name}\""),
            ));
        };
        let mut settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        match value {
            None => {
                settings.remove(s.name);
            }
            Some(v) => {
                let v = v.trim();
                let v = v
                    .strip_prefix('\'')
                    .and_then(|v| v.strip_suffix('\''))
                    .unwrap_or(v);
                if s.read_only {
                    return Err(errors::error(
                        "55P02",
                        format!("parameter \"{}\" cannot be changed", s.name),
                    ));
                }
                let v = (s.check)(v).map_err(|why| {
                    errors::error(
                        code::INVALID_PARAMETER,
                        format!("invalid value for parameter \"{}\": \"{v}\": {why}", s.name),
                    )
                })?;
                settings.insert(s.name.to_string(), v);
            }
        }
        Ok(())
    }

    /// A setting's value: the client's, else the door's default.
    pub fn get(&self, name: &str, defaults: &Defaults) -> Option<String> {
        let s = setting(name)?;
        let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        Some(
            settings
                .get(s.name)
                .cloned()
                .unwrap_or_else(|| defaults.value(s.name, &self.identity)),
        )
    }

    /// Resets every setting.
    pub fn reset_all(&self) {
        self.settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// `statement_timeout` in milliseconds (0: the gateway's default).
    pub fn statement_timeout_ms(&self) -> u64 {
        let settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        settings
            .get("statement_timeout")
            .and_then(|v| duration_ms(v).ok())
            .unwrap_or(0)
    }

    /// Records the statement running now.
    pub fn running(&self, r: Option<Arc<Running>>) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = r;
    }

    /// The statement running now, if any.
    pub fn current(&self) -> Option<Arc<Running>> {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What the door reports for settings no client set.
pub struct Defaults {
    /// `server_version`.
    pub server_version: String,
    /// `default_transaction_read_only`: `on` under the read-only policy.
    pub read_only: bool,
}

impl Defaults {
    fn value(&self, name: &str, identity: &Identity) -> String {
        match name {
            "server_version" => self.server_version.clone(),
            "server_version_num" => "160006".into(),
            "session_authorization" => identity.name.to_string(),
            "default_transaction_read_only" | "transaction_read_only" => {
                if self.read_only { "on" } else { "off" }.into()
            }
            _ => setting(name)
                .map(|s| s.default.to_string())
                .unwrap_or_default(),
        }
    }
}
