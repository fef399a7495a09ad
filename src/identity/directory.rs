//! The identities as configured: the static tokens, the roles and the URL
//! key, read at start-up and again by a reload (`SIGHUP`, `POST
//! /admin/reload`, or a token, key or TOML file that changed), and put in
//! place whole: a call sees the old directory or the new one.
//!
//! A reload is all or nothing. It is refused, and the current directory
//! kept, when the new one would:
//! - fail to read or check (a role's grant naming nothing, a filter that
//!   does not bind, a token too short);
//! - leave a role member naming no query token (a typo, `alicia` for
//!   `alice`, would otherwise leave `alice` unconfined);
//! - move a token to another name (the same secret under a new name would
//!   hand one holder's statements and roles to another);
//! - leave no way in that there was (query tokens that all went away, an
//!   empty admin token file) or switch between anonymous and token access.
//!
//! Sections of the TOML file that are not roles (`[[secret]]`,
//! `[[attach]]`, `[[source]]`, ...) are not reloaded: a changed one is
//! named in the answer as needing a restart.

use std::sync::Arc;

use secrecy::ExposeSecret;

use super::signer::UrlSigner;
use super::tokens::{self, Tokens};
use crate::config::roles::RoleSpec;
use crate::config::{AuthConfig, ConfigError, ConfigFile};
use crate::identity::roles::Roles;

/// Tokens, roles and the URL key, as one value.
pub struct Directory {
    /// The static tokens.
    pub tokens: Tokens,
    /// The roles (`[[role]]`), with the named sources their grants name.
    pub roles: Arc<Roles>,
    /// The roles as declared, to tell what a reload changes.
    pub specs: Vec<RoleSpec>,
    /// Signs and checks result URLs that need no header.
    pub signer: UrlSigner,
}

/// What a reload reads besides the settings: where the TOML file is, the
/// sections of it that only a restart takes, the named sources (which a
/// restart creates), and the listen address (short tokens are refused
/// beyond loopback).
#[derive(Clone)]
pub struct Sources {
    /// The settings of the tokens and keys.
    pub auth: AuthConfig,
    /// `DUCKGATE_CONFIG`, if set.
    pub config_file: Option<std::path::PathBuf>,
    /// The TOML file's other sections as start-up read them.
    pub fixed: toml::Table,
    /// The named sources as start-up created them.
    pub sources: Vec<crate::config::sources::SourceSpec>,
    /// The address the API listens on.
    pub addr: std::net::SocketAddr,
}

/// The TOML file's sections that a reload does not take (all but roles).
pub fn fixed_sections(file: Option<&ConfigFile>) -> Result<toml::Table, ConfigError> {
    let mut table = match file {
        Some(f) => f.parse::<toml::Table>()?,
        None => toml::Table::new(),
    };
    table.remove("role");
    Ok(table)
}

impl Directory {
    /// Reads the tokens, the URL key and the roles (`specs`, read from the
    /// TOML file by start-up) and checks their members against the tokens.
    /// The roles' grants are checked against the catalog apart
    /// ([`check_roles`]): that needs a connection.
    pub fn read(from: &Sources, specs: Vec<RoleSpec>) -> Result<Self, ConfigError> {
        Self::with_tokens(tokens::load(&from.auth, from.addr)?, from, specs)
    }

    /// [`Directory::read`] with the tokens already read.
    fn with_tokens(
        tokens: Tokens,
        from: &Sources,
        specs: Vec<RoleSpec>,
    ) -> Result<Self, ConfigError> {
        let roles = Roles::new(&specs, &from.sources)?;
        check_members(&specs, &tokens)?;
        Ok(Self {
            tokens,
            roles: Arc::new(roles),
            specs,
            signer: signer(&from.auth)?,
        })
    }
}

/// The URL key: its file's, or a random one.
fn signer(auth: &AuthConfig) -> Result<UrlSigner, ConfigError> {
    let Some(path) = &auth.url_signing_key_file else {
        return Ok(UrlSigner::random());
    };
    let key = std::fs::read(path).map_err(|e| {
        ConfigError::new(
            "DUCKGATE_URL_SIGNING_KEY_FILE",
            format!("cannot read {}: {}", path.display(), e.kind()),
        )
    })?;
    // A key written as text (`openssl rand -base64 32 > key`) ends in a
    // newline that is not part of it; raw random bytes are the key as they
    // are (trimming them cut ~4% of random 32-byte keys to 31 bytes).
    let text = key
        .iter()
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace());
    let key = if text { key.trim_ascii().to_vec() } else { key };
    if key.len() < 32 {
        return Err(ConfigError::new(
            "DUCKGATE_URL_SIGNING_KEY_FILE",
            format!(
                "{} holds {} bytes; a URL signing key needs at least 32",
                path.display(),
                key.len()
            ),
        ));
    }
    Ok(UrlSigner::new(key))
}

/// Every member of every role names a query token (or `anonymous`, the
/// caller of an anonymous gateway), or is an OIDC identity (`oidc:<name>`,
/// which cannot be checked before it calls).
fn check_members(specs: &[RoleSpec], tokens: &Tokens) -> Result<(), ConfigError> {
    for spec in specs {
        for member in &spec.members {
            let known = member.starts_with("oidc:")
                || tokens.names(member)
                || (tokens.anonymous && member == "anonymous");
            if !known {
                return Err(ConfigError::new(
                    "DUCKGATE_CONFIG",
                    format!(
                        "role '{}': member '{member}' is no query token's name (members are token names, or oidc:<name> for OIDC identities); a member that names nothing would leave the token it meant unconfined",
                        spec.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Checks that every grant of `roles` names something that exists in the
/// catalog, and that each row filter and mask binds, on a connection of
/// `engine`'s pool taken for it (start-up and reloads).
pub async fn check_roles(
    engine: &Arc<crate::engine::Engine>,
    catalogs: &[crate::engine::catalogs::Catalog],
    roles: &Arc<Roles>,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if !roles.any() {
        return Ok(());
    }
    let (mut slot, lease) = engine
        .pool
        .acquire(None, None, false)
        .await
        .map_err(|e| anyhow::anyhow!("checking the roles' grants: {e:?}"))?;
    let declared = catalogs.to_vec();
    let checked = roles.clone();
    tokio::task::spawn_blocking(move || {
        let out = (|| {
            let conn = slot.unconfined().map_err(anyhow::Error::msg)?;
            let objects = crate::engine::catalogs::objects(conn, &declared)
                .context("reading the catalog to check the roles' grants")?;
            checked.check_against(&objects)?;
            // Each row filter and mask binds (DuckDB's binder, on the
            // guard's connection, which runs nothing else meanwhile).
            for (what, doc) in checked.policy_checks(&objects) {
                crate::engine::policy::check(&slot.raw, &doc)
                    .map_err(|e| ConfigError::new("DUCKGATE_CONFIG", format!("{what}: {e}")))?;
            }
            anyhow::Ok(())
        })();
        lease.release(slot);
        out
    })
    .await
    .context("checking the roles' grants")?
}

/// What a reload did.
#[derive(Debug, Default, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Changes {
    /// What changed and took effect, one line each (names, never a token).
    pub changed: Vec<String>,
    /// Sections of the TOML file that changed and take effect only after a
    /// restart (the running gateway keeps what it started with).
    pub restart_required: Vec<String>,
}

/// The directory a reload would put in place, and what it changes; or why
/// it is refused. Reads every file again; checks the new roles' grants
/// against the catalog with `check` (see [`check_roles`]).
pub async fn reread<F, Fut>(
    current: &Directory,
    from: &Sources,
    check: F,
) -> Result<(Directory, Changes), String>
where
    F: FnOnce(Arc<Roles>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut changes = Changes::default();
    let file = from
        .config_file
        .as_deref()
        .map(ConfigFile::read)
        .transpose()
        .map_err(|e| e.to_string())?;
    let specs = match &file {
        Some(f) => crate::config::roles::roles_in(f).map_err(|e| e.to_string())?,
        None => Vec::new(),
    };
    let fixed = fixed_sections(file.as_ref()).map_err(|e| e.to_string())?;
    changes.restart_required = restart_required(&from.fixed, &fixed);
    let tokens = tokens::load(&from.auth, from.addr).map_err(|e| e.to_string())?;
    let old = &current.tokens;
    refuse_lost_access(old, &tokens)?;
    let mut new = Directory::with_tokens(tokens, from, specs).map_err(|e| e.to_string())?;
    refuse_moves(current, &new)?;
    if new
        .specs
        .iter()
        .map(|s| format!("{s:?}"))
        .ne(current.specs.iter().map(|s| format!("{s:?}")))
    {
        check(new.roles.clone())
            .await
            .map_err(|e| format!("{e:#}"))?;
    }
    // What changed, by name.
    changes.changed = token_changes(old, &new.tokens);
    if from.auth.url_signing_key_file.is_some() && !new.signer.same_key(&current.signer) {
        new.signer.keep_verifying(&current.signer);
        changes.changed.push("URL signing key replaced".into());
    } else {
        new.signer = current.signer.clone();
    }
    changes
        .changed
        .extend(role_changes(&current.specs, &new.specs));
    Ok((new, changes))
}

/// The fixed sections of the TOML file (`[section]`) that a reload would
/// add, change or remove: they take effect only after a restart.
fn restart_required(running: &toml::Table, reread: &toml::Table) -> Vec<String> {
    let mut sections = Vec::new();
    for (section, value) in reread {
        if running.get(section) != Some(value) {
            sections.push(format!("[{section}]"));
        }
    }
    for section in running.keys() {
        if !reread.contains_key(section) {
            sections.push(format!("[{section}]"));
        }
    }
    sections
}

/// Refuses a reload that would take access away in a way only a restart
/// may: every query token gone, anonymous access switched, the admin API
/// switched off.
fn refuse_lost_access(old: &Tokens, tokens: &Tokens) -> Result<(), String> {
    if tokens.query.is_empty() && !old.query.is_empty() {
        return Err(
            "the reload would remove every query token (an empty token file?); the current tokens stay"
                .into(),
        );
    }
    if tokens.anonymous != old.anonymous {
        return Err(
            "a reload cannot switch between anonymous and token access; restart for that".into(),
        );
    }
    if tokens.admin.is_none() && old.admin.is_some() {
        return Err(
            "the reload would switch the admin API off; unset the admin token and restart for that"
                .into(),
        );
    }
    Ok(())
}

/// The query tokens added, removed and replaced, by name, and whether the
/// admin token was replaced.
fn token_changes(old: &Tokens, new: &Tokens) -> Vec<String> {
    let mut changed = Vec::new();
    let names =
        |t: &Tokens| -> Vec<String> { t.query.iter().map(|q| q.name.to_string()).collect() };
    let (before, after) = (names(old), names(new));
    for n in after.iter().filter(|n| !before.contains(n)) {
        changed.push(format!("query token {n} added"));
    }
    for n in before.iter().filter(|n| !after.contains(n)) {
        changed.push(format!("query token {n} removed"));
    }
    for o in &old.query {
        if new
            .query
            .iter()
            .any(|n| n.name == o.name && n.secret.expose_secret() != o.secret.expose_secret())
        {
            changed.push(format!("query token {} replaced", o.name));
        }
    }
    let admin = |t: &Tokens| t.admin.as_ref().map(|a| a.expose_secret().to_string());
    if admin(old) != admin(new) {
        changed.push("admin token replaced".into());
    }
    changed
}

/// The roles added, changed and removed, by name.
fn role_changes(current: &[RoleSpec], new: &[RoleSpec]) -> Vec<String> {
    let mut changed = Vec::new();
    let spec_named = |list: &[RoleSpec], name: &str| -> Option<String> {
        list.iter()
            .find(|s| s.name == name)
            .map(|s| format!("{s:?}"))
    };
    for s in new {
        match spec_named(current, &s.name) {
            None => changed.push(format!("role {} added", s.name)),
            Some(old) if old != format!("{s:?}") => {
                changed.push(format!("role {} changed", s.name))
            }
            Some(_) => {}
        }
    }
    for s in current {
        if spec_named(new, &s.name).is_none() {
            changed.push(format!("role {} removed", s.name));
        }
    }
    changed
}

/// Refuses a reload that gives a token another name: the same secret named
/// differently (a swapped line, a name edited) would hand its holder's
/// statements and roles to the new name, or another holder's to it.
fn refuse_moves(current: &Directory, new: &Directory) -> Result<(), String> {
    for n in &new.tokens.query {
        if let Some(o) = current
            .tokens
            .query
            .iter()
            .find(|o| o.secret.expose_secret() == n.secret.expose_secret() && o.name != n.name)
        {
            return Err(format!(
                "the token named {} would be named {}: a reload does not move a token between names (its statements and roles would follow); remove it, reload, then add it under its new name",
                o.name, n.name
            ));
        }
    }
    Ok(())
}

/// Reloads the directory in `cell` (see [`reread`]) and counts and logs
/// the outcome (names and what changed, never a token).
pub async fn reload<F, Fut>(
    cell: &arc_swap::ArcSwap<Directory>,
    from: &Sources,
    why: &'static str,
    check: F,
) -> Result<Changes, String>
where
    F: FnOnce(Arc<Roles>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let current = cell.load_full();
    match reread(&current, from, check).await {
        Ok((new, changes)) => {
            cell.store(Arc::new(new));
            metrics::counter!("duckgate_config_reloads_total", "outcome" => "ok").increment(1);
            if changes.changed.is_empty() && changes.restart_required.is_empty() {
                tracing::info!(trigger = why, "reloaded: nothing changed");
            } else {
                tracing::info!(
                    trigger = why,
                    changed = ?changes.changed,
                    restart_required = ?changes.restart_required,
                    "reloaded"
                );
            }
            Ok(changes)
        }
        Err(e) => {
            metrics::counter!("duckgate_config_reloads_total", "outcome" => "refused").increment(1);
            tracing::error!(trigger = why, error = %e, "reload refused: the current tokens and roles stay");
            Err(e)
        }
    }
}

/// The files a reload reads, by modification time and size: what a change
/// looks like from outside (a Kubernetes Secret's or ConfigMap's volume is
/// updated in place).
pub fn watched(from: &Sources) -> Vec<std::path::PathBuf> {
    [
        &from.auth.query_tokens_file,
        &from.auth.admin_token_file,
        &from.auth.url_signing_key_file,
        &from.config_file,
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect()
}

/// The stamps of `files` (modification time and size).
pub fn stamps(files: &[std::path::PathBuf]) -> Vec<Option<(std::time::SystemTime, u64)>> {
    files
        .iter()
        .map(|f| {
            std::fs::metadata(f)
                .ok()
                .and_then(|m| m.modified().ok().map(|t| (t, m.len())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(dir: &std::path::Path, tokens: &str, toml_text: &str) -> Sources {
        let token_file = dir.join("tokens");
        std::fs::write(&token_file, tokens).unwrap();
        let config_file = dir.join("duckgate.toml");
        std::fs::write(&config_file, toml_text).unwrap();
        let cli = <crate::config::Cli as clap::Parser>::try_parse_from([
            "duckgate",
            "--query-tokens-file",
            token_file.to_str().unwrap(),
        ])
        .unwrap();
        let file = ConfigFile::read(&config_file).unwrap();
        Sources {
            auth: cli.config.auth.clone(),
            config_file: Some(config_file),
            fixed: fixed_sections(Some(&file)).unwrap(),
            sources: Vec::new(),
            addr: "127.0.0.1:0".parse().unwrap(),
        }
    }

    fn read(from: &Sources) -> Result<Directory, String> {
        let file = ConfigFile::read(from.config_file.as_ref().unwrap()).unwrap();
        let specs = crate::config::roles::roles_in(&file).map_err(|e| e.to_string())?;
        Directory::read(from, specs).map_err(|e| e.to_string())
    }

    async fn reread_now(current: &Directory, from: &Sources) -> Result<Changes, String> {
        reread(current, from, |_| async { Ok(()) })
            .await
            .map(|(_, c)| c)
    }

    const ROLE: &str =
        "[[role]]\nname = \"r\"\nmembers = [\"alice\"]\nread = [\"memory.main.t\"]\n";

    #[test]
    fn a_member_naming_no_token_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let from = sources(dir.path(), "alice:alice-token-0123456789\n", ROLE);
        assert!(read(&from).is_ok());
        let typo = ROLE.replace("\"alice\"", "\"alicia\"");
        let from = sources(dir.path(), "alice:alice-token-0123456789\n", &typo);
        let e = read(&from).err().unwrap();
        assert!(e.contains("member 'alicia'"), "{e}");
        let oidc = ROLE.replace("\"alice\"", "\"oidc:someone\"");
        assert!(read(&sources(
            dir.path(),
            "alice:alice-token-0123456789\n",
            &oidc
        ))
        .is_ok());
    }

    #[tokio::test]
    async fn a_reload_says_what_changed_and_refuses_what_would_lock_out_or_move() {
        let dir = tempfile::tempdir().unwrap();
        let two = "alice:alice-token-0123456789\nbob:bob-token-0123456789ab\n";
        // Start-up's reading: the files as they were then.
        let from = sources(dir.path(), two, ROLE);
        let current = read(&from).unwrap();
        let rewrite = |tokens: &str, toml_text: &str| {
            std::fs::write(dir.path().join("tokens"), tokens).unwrap();
            std::fs::write(dir.path().join("duckgate.toml"), toml_text).unwrap();
        };
        // Nothing changed.
        let c = reread_now(&current, &from).await.unwrap();
        assert!(
            c.changed.is_empty() && c.restart_required.is_empty(),
            "{c:?}"
        );
        // A role removed, a section that needs a restart.
        rewrite(two, "[[secret]]\nname = \"x\"\n");
        let c = reread_now(&current, &from).await.unwrap();
        assert_eq!(c.changed, vec!["role r removed".to_string()], "{c:?}");
        assert_eq!(c.restart_required, vec!["[secret]".to_string()]);
        // Swapped secrets: refused.
        rewrite(
            "alice:bob-token-0123456789ab\nbob:alice-token-0123456789\n",
            ROLE,
        );
        let e = reread_now(&current, &from).await.unwrap_err();
        assert!(e.contains("does not move a token"), "{e}");
        // An empty token file: refused.
        rewrite("", ROLE);
        let e = reread_now(&current, &from).await.unwrap_err();
        assert!(e.contains("every query token"), "{e}");
        // A member that no longer names a token: refused.
        rewrite("bob:bob-token-0123456789ab\n", ROLE);
        let e = reread_now(&current, &from).await.unwrap_err();
        assert!(e.contains("member 'alice'"), "{e}");
        // A token added, one replaced, a role changed.
        let role2 = ROLE.replace("memory.main.t", "memory.main.u");
        rewrite(
            "alice:alice-token-0123456789\nbob:bob-token-new-0123456789\ncarol:carol-token-0123456789\n",
            &role2,
        );
        let mut c = reread_now(&current, &from).await.unwrap().changed;
        c.sort();
        assert_eq!(
            c,
            vec![
                "query token bob replaced".to_string(),
                "query token carol added".to_string(),
                "role r changed".to_string()
            ]
        );
    }
}
