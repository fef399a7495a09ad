//! Startup and authentication: the password is a query token or an OIDC
//! JWT, checked as HTTP checks a bearer credential.
//!
//! - Without TLS: SCRAM-SHA-256, so a token never crosses the network;
//!   the user name names the token (`alice` for `alice:<token>` of
//!   `DUCKGATE_QUERY_TOKENS`), since SCRAM must know whose password to
//!   check. A JWT cannot be checked this way (the server cannot know it
//!   beforehand): over plain TCP it is refused.
//! - Inside TLS: a cleartext password, which may be a query token or a JWT;
//!   the user name is ignored (the credential says who).
//! - On an anonymous gateway (loopback, no tokens): no password.
//!
//! A wrong credential is `28P01`. The database name is ignored.
//! Authenticated, the connection gets its [`Session`], is counted against
//! the identity's connection limit (`53300` beyond it) and can be
//! cancelled by its key.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::cleartext::CleartextPasswordAuth;
use pgwire::api::auth::mechanism::{AuthMechanism, AuthMechanismFactory, AuthState};
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth, ScramSecret};
use pgwire::api::auth::{
    AuthDriver, AuthOutcome, AuthSource, LoginInfo, Password, ServerParameterProvider,
    StartupHandler,
};
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::PasswordMessageFamily;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use secrecy::ExposeSecret;

use crate::pg::backend::{self, Identity};
use crate::pg::errors::{self, code};
use crate::pg::session::{self, Session};
use crate::pg::Door;

/// The iterations SCRAM asks the client for (PostgreSQL's default).
const SCRAM_ITERATIONS: usize = 4096;

/// Checks credentials against the gateway's identities.
#[derive(Debug)]
pub struct Credentials {
    pub(crate) door: Arc<Door>,
}

#[async_trait]
impl AuthSource<Identity> for Credentials {
    async fn get_password(&self, _login: &LoginInfo) -> PgWireResult<Password> {
        Err(PgWireError::InvalidPassword(String::new()))
    }

    /// A cleartext password (inside TLS): a query token or a JWT.
    async fn verify_password(
        &self,
        login: &LoginInfo,
        presented: &[u8],
    ) -> PgWireResult<Option<Identity>> {
        match backend::identify(&self.door.state, presented).await {
            Some(identity) => Ok(Some(identity)),
            None => Err(PgWireError::InvalidPassword(
                login.user().unwrap_or_default().to_string(),
            )),
        }
    }

    /// SCRAM: the salted password of the token the user name names. An
    /// unknown name gets a random one, so the exchange fails at its end
    /// exactly as a wrong password does.
    async fn get_scram_secret(
        &self,
        login: &LoginInfo,
    ) -> PgWireResult<(ScramSecret, Option<Identity>)> {
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).map_err(|_| PgWireError::InvalidSASLState)?;
        let user = login.user().unwrap_or_default();
        let (password, identity) = match backend::token_named(&self.door.state, user) {
            Some(secret) => {
                let identity =
                    backend::identify(&self.door.state, secret.expose_secret().as_bytes()).await;
                (secret.expose_secret().to_string(), identity)
            }
            None => {
                let mut random = [0u8; 32];
                getrandom::fill(&mut random).map_err(|_| PgWireError::InvalidSASLState)?;
                (
                    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, random),
                    None,
                )
            }
        };
        let salted = gen_salted_password(&password, &salt, SCRAM_ITERATIONS);
        Ok((
            ScramSecret::SaltedPassword {
                salt: salt.to_vec(),
                salted_password: salted,
            },
            identity,
        ))
    }
}

/// The anonymous gateway's mechanism: no password.
struct Trust(Option<Identity>);

#[async_trait]
impl AuthMechanism<Identity> for Trust {
    async fn begin(
        &mut self,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> PgWireResult<AuthState<Identity>> {
        Ok(AuthState::Ok {
            final_message: None,
            identity: self.0.take(),
        })
    }

    async fn next(
        &mut self,
        _client: &(dyn ClientInfo + Send + Sync),
        _message: PasswordMessageFamily,
    ) -> PgWireResult<AuthState<Identity>> {
        Err(PgWireError::NoAuthenticationInProgress)
    }
}

/// The settings a client is told at startup.
pub struct Parameters {
    pub(crate) door: Arc<Door>,
}

impl ServerParameterProvider for Parameters {
    fn server_parameters<C>(&self, client: &C) -> Option<HashMap<String, String>>
    where
        C: ClientInfo,
    {
        let session = client.session_extensions().get::<Session>()?;
        Some(
            session::REPORTED
                .iter()
                .filter_map(|name| {
                    session
                        .get(name, &self.door.defaults)
                        .map(|v| (name.to_string(), v))
                })
                .collect(),
        )
    }
}

/// Runs the startup of each connection.
pub struct Startup {
    pub(crate) door: Arc<Door>,
    driver: AuthDriver<Parameters, Identity>,
    scram: ScramAuth<Identity>,
    cleartext: CleartextPasswordAuth<Credentials>,
}

impl Startup {
    /// The startup of the door's connections.
    pub fn new(door: Arc<Door>) -> Self {
        let credentials = Arc::new(Credentials { door: door.clone() });
        let mut scram = ScramAuth::new(credentials.clone() as Arc<dyn AuthSource<Identity>>);
        scram.set_iterations(SCRAM_ITERATIONS);
        Startup {
            driver: AuthDriver::new(Parameters { door: door.clone() }),
            scram,
            cleartext: CleartextPasswordAuth::new(credentials),
            door,
        }
    }

    /// What follows a verified credential: the session, the identity's
    /// connection count, the key a cancel request names, then the end of
    /// the startup.
    async fn authenticated<C>(
        &self,
        client: &mut C,
        identity: Option<Identity>,
        final_message: Option<pgwire::messages::startup::Authentication>,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(identity) = identity else {
            self.door.count_auth_failure("wrong");
            return Err(PgWireError::InvalidPassword(
                client.metadata().get("user").cloned().unwrap_or_default(),
            ));
        };
        let slot = self.door.admit_identity(&identity.name).ok_or_else(|| {
            errors::fatal(
                code::TOO_MANY_CONNECTIONS,
                format!(
                    "too many connections for {}: DUCKGATE_PG_MAX_CONNECTIONS_PER_IDENTITY is {}",
                    identity.name, self.door.limits.max_connections_per_identity
                ),
            )
        })?;
        let session = Session::new(identity, client.metadata());
        client.session_extensions().insert(session);
        client.session_extensions().insert(slot);
        self.driver
            .complete_authentication(client, final_message)
            .await?;
        let (pid, key) = client.pid_and_secret_key();
        if let Some(session) = client.session_extensions().get::<Session>() {
            let registered = self
                .door
                .register_cancel(pid, key.to_bytes().to_vec(), &session);
            client.session_extensions().insert(registered);
        }
        Ok(())
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                pgwire::api::auth::protocol_negotiation(client, startup).await?;
                pgwire::api::auth::save_startup_parameters_to_metadata(client, startup);
                let mechanism: Box<dyn AuthMechanism<Identity>> =
                    if backend::anonymous(&self.door.state) {
                        Box::new(Trust(backend::anonymous_identity(&self.door.state).await))
                    } else if client.is_secure() {
                        self.cleartext.create()
                    } else {
                        self.scram.create()
                    };
                match self.driver.begin_authentication(client, mechanism).await? {
                    AuthOutcome::Authenticated {
                        identity,
                        final_message,
                    } => self.authenticated(client, identity, final_message).await,
                    AuthOutcome::InProgress => Ok(()),
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let outcome = self.driver.advance_authentication(client, message).await;
                match outcome {
                    Ok(AuthOutcome::Authenticated {
                        identity,
                        final_message,
                    }) => self.authenticated(client, identity, final_message).await,
                    Ok(AuthOutcome::InProgress) => Ok(()),
                    Err(e) => {
                        if matches!(
                            e,
                            PgWireError::InvalidPassword(_) | PgWireError::InvalidScramMessage(_)
                        ) {
                            self.door.count_auth_failure("wrong");
                        }
                        // Never echo what the client sent.
                        let _ = client.flush().await;
                        let user = client.metadata().get("user").cloned().unwrap_or_default();
                        Err(match e {
                            PgWireError::InvalidPassword(_) => errors::fatal(
                                code::BAD_PASSWORD,
                                format!("password authentication failed for user \"{user}\""),
                            ),
                            PgWireError::InvalidScramMessage(_) | PgWireError::InvalidSASLState => {
                                errors::fatal(code::BAD_PASSWORD, "password authentication failed")
                            }
                            other => other,
                        })
                    }
                }
            }
            _ => Ok(()),
        }
    }
}
