//! The claims of a token whose signature holds: issuer, audience, times
//! within the leeway, the name and the roles.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::{Refusal, Verified, Verifier, MAX_NAME_BYTES};

/// Now, in milliseconds since the Unix epoch.
fn now_unix_ms() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i128)
}

/// A NumericDate claim (seconds since the epoch, maybe fractional) in ms.
fn numeric_date_ms(v: &Value) -> Option<i128> {
    if let Some(i) = v.as_i64() {
        return Some(i as i128 * 1000);
    }
    v.as_f64()
        .filter(|f| f.is_finite())
        .map(|f| (f * 1000.0) as i128)
}

/// A claim by its exact name (JSON names are case-sensitive: `TENANT` is
/// not `tenant`), or, for a name with dots, by its path through nested
/// objects (`realm_access.roles`). `Err` when both name a value (a claim
/// literally named `org.tenant` beside `org: {tenant}`): which one the
/// token means is not the gateway's to guess (row policies read claims the
/// same way, `engine/policy/document.cpp`).
fn claim<'a>(claims: &'a Map<String, Value>, name: &str) -> Result<Option<&'a Value>, ()> {
    let literal = claims.get(name);
    let path = name.contains('.').then(|| {
        let mut parts = name.split('.');
        let mut v = claims.get(parts.next()?)?;
        for p in parts {
            v = v.as_object()?.get(p)?;
        }
        Some(v)
    });
    match (literal, path.flatten()) {
        (Some(_), Some(_)) => Err(()),
        (l, p) => Ok(l.or(p)),
    }
}

impl Verifier {
    /// The checks after the signature: issuer, audience, time, name, roles.
    pub(super) fn check_claims(&self, claims: Map<String, Value>) -> Result<Verified, Refusal> {
        self.check_issuer_and_audience(&claims)?;
        self.check_times(&claims)?;
        let name = self.name_of(&claims)?;
        let roles = self.roles_of(&claims)?;
        Ok(Verified {
            name: name.into(),
            roles,
            claims: Arc::new(claims),
        })
    }

    /// `iss` is the issuer, `aud` names one of the audiences.
    fn check_issuer_and_audience(&self, claims: &Map<String, Value>) -> Result<(), Refusal> {
        let s = &self.settings;
        if claims.get("iss").and_then(Value::as_str) != Some(s.issuer.as_str()) {
            return Err(Refusal::WrongIssuer);
        }
        let audience_ok = match claims.get("aud") {
            Some(Value::String(a)) => s.audiences.iter().any(|x| x == a),
            Some(Value::Array(all)) => all
                .iter()
                .filter_map(Value::as_str)
                .any(|a| s.audiences.iter().any(|x| x == a)),
            _ => false,
        };
        if !audience_ok {
            return Err(Refusal::WrongAudience);
        }
        Ok(())
    }

    /// `exp` (required) and `nbf` hold within the leeway.
    fn check_times(&self, claims: &Map<String, Value>) -> Result<(), Refusal> {
        let s = &self.settings;
        let now = now_unix_ms();
        let leeway = s.leeway.as_millis() as i128;
        let exp = claims
            .get("exp")
            .ok_or(Refusal::Malformed("it has no expiry (exp)"))?;
        let exp =
            numeric_date_ms(exp).ok_or(Refusal::Malformed("its expiry (exp) is not a number"))?;
        if now >= exp + leeway {
            return Err(Refusal::Expired);
        }
        if let Some(nbf) = claims.get("nbf") {
            let nbf = numeric_date_ms(nbf).ok_or(Refusal::Malformed(
                "its not-before time (nbf) is not a number",
            ))?;
            if now + leeway < nbf {
                return Err(Refusal::NotYetValid);
            }
        }
        Ok(())
    }

    /// The identity's name: the name claim, a name.
    fn name_of(&self, claims: &Map<String, Value>) -> Result<String, Refusal> {
        let s = &self.settings;
        let name = match claim(claims, &s.name_claim).map_err(|()| ambiguous())? {
            Some(Value::String(n))
                if !n.is_empty()
                    && n.len() <= MAX_NAME_BYTES
                    && !n.chars().any(char::is_control) =>
            {
                format!("oidc:{n}")
            }
            Some(_) => {
                return Err(Refusal::Malformed(
                    "its name claim (DUCKGATE_OIDC_NAME_CLAIM) is not a name: a string of 1-256 bytes without control characters",
                ))
            }
            None => {
                return Err(Refusal::Malformed(
                    "it lacks the name claim (DUCKGATE_OIDC_NAME_CLAIM)",
                ))
            }
        };
        Ok(name)
    }

    /// The identity's roles: the roles claim, a list of names (or a
    /// space-separated string of them), none when absent.
    fn roles_of(&self, claims: &Map<String, Value>) -> Result<Vec<Arc<str>>, Refusal> {
        let s = &self.settings;
        let roles: Vec<Arc<str>> = match claim(claims, &s.roles_claim).map_err(|()| ambiguous())? {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(text)) => text.split_whitespace().map(Arc::from).collect(),
            Some(Value::Array(items)) => {
                let mut roles = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str() {
                        Some(r) if !r.is_empty() && !r.chars().any(char::is_control) => {
                            roles.push(Arc::from(r))
                        }
                        _ => {
                            return Err(Refusal::Malformed(
                                "its roles claim (DUCKGATE_OIDC_ROLES_CLAIM) holds something that is not a role name",
                            ))
                        }
                    }
                }
                roles
            }
            Some(_) => {
                return Err(Refusal::Malformed(
                    "its roles claim (DUCKGATE_OIDC_ROLES_CLAIM) is neither an array of strings nor a space-separated string",
                ))
            }
        };
        Ok(roles)
    }
}

/// A claim read by a name that names two values (a name with dots beside
/// the same path through objects).
fn ambiguous() -> Refusal {
    Refusal::Malformed(
        "a claim it is read by names two values (a name with dots beside the same path through objects)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_by_name_or_path() {
        let m: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "https://example.com/roles": ["a"],
            "realm_access": {"roles": ["b", "c"]},
            "Roles": ["x"],
            "org": {"tenant": "acme"},
            "org.tenant": "globex"
        }))
        .unwrap();
        assert_eq!(
            claim(&m, "https://example.com/roles"),
            Ok(Some(&serde_json::json!(["a"])))
        );
        assert_eq!(
            claim(&m, "realm_access.roles"),
            Ok(Some(&serde_json::json!(["b", "c"])))
        );
        assert_eq!(claim(&m, "realm_access.nope"), Ok(None));
        // Exact names: `Roles` is not `roles`.
        assert_eq!(claim(&m, "roles"), Ok(None));
        assert_eq!(claim(&m, "Roles"), Ok(Some(&serde_json::json!(["x"]))));
        // A literal dotted name beside the same path: neither is taken.
        assert_eq!(claim(&m, "org.tenant"), Err(()));
    }

    #[test]
    fn numeric_dates() {
        assert_eq!(numeric_date_ms(&serde_json::json!(10)), Some(10_000));
        assert_eq!(numeric_date_ms(&serde_json::json!(10.5)), Some(10_500));
        assert_eq!(numeric_date_ms(&serde_json::json!("10")), None);
    }
}
