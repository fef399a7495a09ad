//! Static bearer tokens: query tokens, each with the name that lists, logs,
//! metrics, roles and statements know it by, and the admin token. Read from
//! the settings and their files; compared in constant time; never logged.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::config::{AuthConfig, ConfigError};

/// A query token and the name lists, logs and metrics show for it.
pub struct NamedToken {
    /// The token's name: the one given as `name:token`, else
    /// `token-<12 hex digits>` derived from the token itself ([`bare_name`]).
    pub name: Arc<str>,
    /// The token itself.
    pub secret: SecretString,
}

/// PBKDF2 rounds of a bare token's name: a log reader who tests guesses of
/// a short token against its name pays this much per guess (tokens beyond
/// loopback are at least [`MIN_TOKEN_CHARS`] long, beyond guessing anyway).
const NAME_ROUNDS: u32 = 20_000;

/// The name of a token given without one: `token-` and the first 6 bytes of
/// PBKDF2-HMAC-SHA256 of the token, in hex. It depends on the token alone,
/// so adding or removing another token renames nothing (a name by position
/// did: deleting a line moved every later token's roles and statements to
/// its neighbour), and every replica names it alike.
pub fn bare_name(secret: &str) -> String {
    let mut out = [0u8; 6];
    pbkdf2::pbkdf2::<hmac::Hmac<sha2::Sha256>>(
        secret.as_bytes(),
        b"duckgate: the name of a bare query token",
        NAME_ROUNDS,
        &mut out,
    )
    .expect("HMAC takes keys of any length");
    let mut name = String::with_capacity(18);
    name.push_str("token-");
    for b in out {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

impl NamedToken {
    /// `name:token` names a token (a name is 1-64 of `A-Za-z0-9._-`); a bare
    /// token (no `:`) is named by [`bare_name`]. An entry with a `:` whose
    /// name is not a name is refused rather than taken for a bare token
    /// (`bad name:abc` meant a name). `position` only places errors.
    pub fn parse(text: &str, position: usize) -> Result<Self, String> {
        match text.split_once(':') {
            Some((name, secret)) => {
                if !(crate::engine::queries::valid_id(name) && name.len() <= 64) {
                    return Err(format!(
                        "entry {position} has the form name:token, and its name is not 1-64 of A-Za-z0-9._-"
                    ));
                }
                if secret.is_empty() {
                    return Err(format!(
                        "entry {position} ({name}) has no token after its name"
                    ));
                }
                Ok(Self {
                    name: name.into(),
                    secret: SecretString::from(secret.to_string()),
                })
            }
            None => Ok(Self {
                name: bare_name(text).into(),
                secret: SecretString::from(text.to_string()),
            }),
        }
    }
}

/// The shortest token the gateway accepts where it listens beyond
/// loopback (query tokens and the admin token).
pub const MIN_TOKEN_CHARS: usize = 16;

/// The configured static tokens.
pub struct Tokens {
    /// Anonymous queries: no query token and no OIDC issuer (start-up
    /// checked that the address or `--allow-anonymous` permits it).
    pub anonymous: bool,
    /// The query tokens (with OIDC on, possibly none).
    pub query: Vec<NamedToken>,
    /// `None`: the admin API is off.
    pub admin: Option<SecretString>,
}

impl Tokens {
    /// The name of the query token `given` is, compared with every token
    /// without an early exit.
    pub fn query_token(&self, given: &[u8]) -> Option<&Arc<str>> {
        use subtle::ConditionallySelectable;
        let mut found = subtle::Choice::from(0u8);
        let mut index = 0u32;
        for (i, t) in self.query.iter().enumerate() {
            let eq = given.ct_eq(t.secret.expose_secret().as_bytes());
            index.conditional_assign(&(i as u32), eq);
            found |= eq;
        }
        bool::from(found).then(|| &self.query[index as usize].name)
    }

    /// Whether `given` is the admin token (compared in constant time).
    pub fn is_admin(&self, given: &[u8]) -> bool {
        self.admin
            .as_ref()
            .is_some_and(|a| bool::from(given.ct_eq(a.expose_secret().as_bytes())))
    }

    /// Whether a query token is named `name`.
    pub fn names(&self, name: &str) -> bool {
        self.query.iter().any(|t| t.name.as_ref() == name)
    }
}

fn read(setting: &'static str, path: &std::path::Path) -> Result<String, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| {
        ConfigError::new(
            setting,
            format!("cannot read {}: {}", path.display(), e.kind()),
        )
    })?;
    String::from_utf8(bytes)
        .map_err(|_| ConfigError::new(setting, format!("{} is not UTF-8 text", path.display())))
}

/// Reads and checks the token settings for a gateway listening on `addr`:
/// the query tokens (`DUCKGATE_QUERY_TOKENS` and its file) and the admin
/// token (or its file). Every file is read now, so a reload calls this
/// again.
pub fn load(auth: &AuthConfig, addr: std::net::SocketAddr) -> Result<Tokens, ConfigError> {
    let entries = query_entries(auth)?;
    let loopback = addr.ip().is_loopback();
    // With OIDC on, identities come from the issuer: no static token is needed.
    let oidc = auth.oidc.enabled();
    if entries.is_empty() && !loopback && !auth.allow_anonymous && !oidc {
        return Err(ConfigError::new(
            "DUCKGATE_QUERY_TOKENS",
            format!(
                "no query tokens and {addr} is not a loopback address: set DUCKGATE_QUERY_TOKENS (or _FILE), or pass --allow-anonymous to serve anonymous queries on purpose"
            ),
        ));
    }
    let query = query_tokens(&entries, addr)?;
    let admin = admin_token(auth)?;
    Ok(Tokens {
        anonymous: query.is_empty() && !oidc,
        query,
        admin: admin.map(|(_, t)| SecretString::from(t)),
    })
}

/// The query tokens' texts (`name:secret` or a bare secret) with the
/// setting each came from: DUCKGATE_QUERY_TOKENS, then the lines of
/// DUCKGATE_QUERY_TOKENS_FILE (blank lines and `#` comments skipped).
fn query_entries(auth: &AuthConfig) -> Result<Vec<(&'static str, String)>, ConfigError> {
    let mut entries: Vec<(&'static str, String)> = auth
        .query_tokens
        .iter()
        .map(|t| t.expose_secret().trim().to_string())
        .filter(|t| !t.is_empty())
        .map(|t| ("DUCKGATE_QUERY_TOKENS", t))
        .collect();
    if let Some(path) = &auth.query_tokens_file {
        let text = read("DUCKGATE_QUERY_TOKENS_FILE", path)?;
        entries.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| ("DUCKGATE_QUERY_TOKENS_FILE", l.to_string())),
        );
    }
    Ok(entries)
}

/// The query tokens parsed, each long enough off loopback, their names
/// unique.
fn query_tokens(
    entries: &[(&'static str, String)],
    addr: std::net::SocketAddr,
) -> Result<Vec<NamedToken>, ConfigError> {
    let loopback = addr.ip().is_loopback();
    let mut query = Vec::with_capacity(entries.len());
    for (i, (setting, text)) in entries.iter().enumerate() {
        let token = NamedToken::parse(text, i + 1).map_err(|e| ConfigError::new(setting, e))?;
        if !loopback && token.secret.expose_secret().chars().count() < MIN_TOKEN_CHARS {
            return Err(ConfigError::new(
                setting,
                format!(
                    "token {} is shorter than {MIN_TOKEN_CHARS} characters, too easy to guess on {addr}",
                    token.name
                ),
            ));
        }
        query.push(token);
    }
    let mut names: Vec<&str> = query.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(ConfigError::new(
            "DUCKGATE_QUERY_TOKENS",
            format!(
                "two query tokens are named {}: names must be unique (two bare tokens of one name are the same token twice)",
                w[0]
            ),
        ));
    }
    Ok(query)
}

/// The admin token with the setting it came from (its file wins over the
/// variable), `None` when the admin API is off; an empty file or a short
/// token is refused.
fn admin_token(auth: &AuthConfig) -> Result<Option<(&'static str, String)>, ConfigError> {
    let admin = match &auth.admin_token_file {
        Some(path) => Some((
            "DUCKGATE_ADMIN_TOKEN_FILE",
            read("DUCKGATE_ADMIN_TOKEN_FILE", path)?.trim().to_string(),
        )),
        None => auth
            .admin_token
            .as_ref()
            .map(|t| ("DUCKGATE_ADMIN_TOKEN", t.expose_secret().trim().to_string())),
    };
    if let Some(("DUCKGATE_ADMIN_TOKEN_FILE", t)) = &admin {
        // A file named on purpose and found empty is a mistake (a Secret
        // not yet filled), not a wish to switch the admin API off.
        if t.is_empty() {
            return Err(ConfigError::new(
                "DUCKGATE_ADMIN_TOKEN_FILE",
                "the admin token file is empty; unset DUCKGATE_ADMIN_TOKEN_FILE to switch the admin API off",
            ));
        }
    }
    let admin = admin.filter(|(_, t)| !t.is_empty());
    if let Some((setting, t)) = &admin {
        if t.chars().count() < MIN_TOKEN_CHARS {
            return Err(ConfigError::new(
                setting,
                format!("must be at least {MIN_TOKEN_CHARS} characters"),
            ));
        }
    }
    Ok(admin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(list: &[&str], admin: Option<&str>) -> Tokens {
        Tokens {
            anonymous: false,
            query: list
                .iter()
                .enumerate()
                .map(|(i, t)| NamedToken::parse(t, i + 1).unwrap())
                .collect(),
            admin: admin.map(|a| SecretString::from(a.to_string())),
        }
    }

    #[test]
    fn tokens_are_found_by_their_whole_value() {
        let t = tokens(&["alpha:alpha-token", "beta"], Some("admin-token"));
        assert_eq!(t.query_token(b"alpha-token").map(|n| &**n), Some("alpha"));
        assert!(t.query_token(b"beta").is_some());
        assert!(t.query_token(b"alpha").is_none());
        assert!(t.query_token(b"").is_none());
        assert!(t.is_admin(b"admin-token"));
        assert!(!t.is_admin(b"admin-toke"));
        assert!(!tokens(&[], None).is_admin(b""));
    }

    /// A bare token's name is its own, whatever its place: removing the
    /// line before it renames nothing.
    #[test]
    fn a_bare_tokens_name_does_not_depend_on_its_place() {
        let before = tokens(&["first-bare-token-aaaa", "second-bare-token-bb"], None);
        let after = tokens(&["second-bare-token-bb"], None);
        assert_eq!(before.query[1].name, after.query[0].name);
        assert_ne!(before.query[0].name, before.query[1].name);
        let name = &after.query[0].name;
        assert!(name.starts_with("token-") && name.len() == 18, "{name}");
        assert!(!name.contains("second"), "{name}");
    }
}
