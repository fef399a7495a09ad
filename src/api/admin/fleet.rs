//! Commands asked of every replica (a rotation, a reload): carried out here,
//! asked of the others through the shared state, their answers gathered
//! within a bound; and the reload on SIGHUP or a changed file.

use super::ReplicaAnswer;
use crate::api::AppState;

/// How long a command asked of every replica waits for their answers.
const FLEET_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Every replica's outcome of a command asked of all.
pub struct FleetOutcome {
    /// Each replica's answer, this one first.
    pub replicas: Vec<ReplicaAnswer>,
    /// Why the others were not asked, if they were not.
    pub not_asked: Option<String>,
}

impl FleetOutcome {
    /// The answer's status: 200 when every replica carried the command
    /// out; 504 when one did not answer within the wait (the list says
    /// which); 207 when one failed or the others could not be asked
    /// (the list says what was done where). Never a failure's status for
    /// what was done.
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        if self
            .replicas
            .iter()
            .any(|r| matches!(r.outcome, "no_answer" | "not_reached"))
        {
            StatusCode::GATEWAY_TIMEOUT
        } else if self.not_asked.is_some() || self.replicas.iter().any(|r| r.outcome != "ok") {
            StatusCode::MULTI_STATUS
        } else {
            StatusCode::OK
        }
    }
}

/// Carries out `command` here (a rotation of every secret or of
/// `argument`, a reload of the tokens and keys); its errors, none when done.
pub async fn carry_out(state: &AppState, command: &str, argument: Option<&str>) -> Vec<String> {
    match command {
        "rotate" => match state.rotator.rotate_now(argument).await {
            Err(e) => vec![e.to_string()],
            Ok(results) => {
                let names: Vec<String> = match argument {
                    Some(n) => vec![n.to_string()],
                    None => state.rotator.names(),
                };
                names
                    .iter()
                    .zip(results)
                    .filter_map(|(n, r)| r.err().map(|e| format!("{n}: {e}")))
                    .collect()
            }
        },
        "reload" => match reload_here(state, "admin request").await {
            Ok(_) => Vec::new(),
            Err(e) => vec![format!(
                "the reload was refused and the current tokens and roles stay: {e}"
            )],
        },
        other => vec![format!("unknown command {other}")],
    }
}

/// Reads the tokens, the URL key and the roles again and puts them in
/// place whole (see [`crate::identity::directory`]): what changed, or why
/// it was refused.
pub async fn reload_here(
    state: &AppState,
    why: &'static str,
) -> Result<crate::identity::directory::Changes, String> {
    let engine = state.engine.clone();
    let catalogs = state.catalogs.clone();
    crate::identity::directory::reload(
        state.identities.directory_cell(),
        &state.reload,
        why,
        |roles| async move {
            crate::identity::directory::check_roles(&engine, &catalogs, &roles).await
        },
    )
    .await
}

/// Reloads on `SIGHUP` and when a token, key or TOML file changes
/// (checked every 2 s: a Kubernetes Secret's or ConfigMap's volume is
/// updated in place), until `stop`.
pub async fn watch(state: AppState, stop: tokio_util::sync::CancellationToken) {
    use crate::identity::directory::{stamps, watched};
    let files = watched(&state.reload);
    let mut last = stamps(&files);
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut every = tokio::time::interval(std::time::Duration::from_secs(2));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        #[cfg(unix)]
        let hup = async {
            match hangup.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let hup = std::future::pending::<()>();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = hup => {
                last = stamps(&files);
                let _ = reload_here(&state, "SIGHUP").await;
            }
            _ = every.tick() => {
                let now = stamps(&files);
                if now != last {
                    last = now;
                    let _ = reload_here(&state, "file changed").await;
                }
            }
        }
    }
}

/// Commands asked of this replica through another one are carried out as
/// if asked here.
impl crate::statements::replication::Commands for AppState {
    fn carry_out<'a>(
        &'a self,
        command: &'a str,
        argument: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, Vec<String>> {
        Box::pin(carry_out(self, command, argument))
    }
}

/// Asks every other live replica (through the shared state) to carry out
/// `command` as this one did (`here`: its errors), and gathers their
/// answers for up to 30 s, less once every replica still asked answered or
/// was taken for dead. A command not taken by then is withdrawn (never
/// carried out late). One replica with no shared state answers alone; with
/// the shared state out of reach, this replica's outcome still stands.
pub(super) async fn everywhere(
    state: &AppState,
    command: &'static str,
    argument: Option<&str>,
    here: Vec<String>,
) -> FleetOutcome {
    let mut out = FleetOutcome {
        replicas: vec![answer(state.health.replica.clone(), here)],
        not_asked: None,
    };
    let Some(shared) = &state.statements.shared else {
        return out;
    };
    let unreachable = |e: String| {
        tracing::warn!(command, error.cause = %e, "the shared state could not be reached: the other replicas were not asked");
        "the shared state could not be reached: the other replicas were not asked (this replica's outcome stands); retry".to_string()
    };
    let (id, asked) = match shared.broadcast(command, argument).await {
        Ok(a) => a,
        Err(e) => {
            out.not_asked = Some(unreachable(e));
            return out;
        }
    };
    tracing::info!(command, replicas = asked.len(), "asked every replica");
    let last = gather(shared, command, &id).await;
    // Not taken by now: withdrawn, so it is never carried out late.
    let withdrawn = shared.withdraw_command(&id).await.unwrap_or_default();
    let mut unanswered = 0u64;
    for replica in asked {
        let seen = last.iter().find(|a| a.replica == replica);
        if seen.and_then(|a| a.answer.as_ref()).is_none() {
            unanswered += 1;
        }
        out.replicas.push(answer_of(replica, seen, &withdrawn));
    }
    if unanswered > 0 {
        metrics::counter!("duckgate_admin_fanout_unanswered_total", "command" => command)
            .increment(unanswered);
        tracing::warn!(
            command,
            unanswered,
            "replicas did not answer a command asked of every replica"
        );
    }
    out
}

/// A replica's answer: `ok` without errors, else `failed` with them.
fn answer(replica: String, errors: Vec<String>) -> ReplicaAnswer {
    ReplicaAnswer {
        replica,
        outcome: if errors.is_empty() { "ok" } else { "failed" },
        errors,
    }
}

/// The replicas' answers to command `id`, read until no live replica is
/// still waiting to answer or [`FLEET_WAIT`] passed. What was seen before a
/// read failed stands; the rest did not answer.
async fn gather(
    shared: &crate::statements::shared::Shared,
    command: &'static str,
    id: &str,
) -> Vec<crate::statements::shared::CommandAnswer> {
    let deadline = tokio::time::Instant::now() + FLEET_WAIT;
    let mut last = Vec::new();
    loop {
        match shared.command_answers(id).await {
            Ok(got) => last = got,
            Err(e) => {
                tracing::warn!(command, error.cause = %e, "reading the replicas' answers failed");
                break;
            }
        }
        let waiting = last.iter().any(|a| a.answer.is_none() && a.alive);
        if !waiting || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    last
}

/// What `replica` answered (`seen`: its row of the answers), or why it did
/// not: `no_answer` when it took the command and did not answer in time,
/// `not_reached` when it never took it (the command `withdrawn` first).
fn answer_of(
    replica: String,
    seen: Option<&crate::statements::shared::CommandAnswer>,
    withdrawn: &[String],
) -> ReplicaAnswer {
    match seen.and_then(|a| a.answer.as_ref()) {
        Some(v) => answer(
            replica,
            v["errors"]
                .as_array()
                .map(|e| {
                    e.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        None => {
            let taken = seen.is_some_and(|a| a.taken) && !withdrawn.contains(&replica);
            ReplicaAnswer {
                replica,
                outcome: if taken { "no_answer" } else { "not_reached" },
                errors: Vec::new(),
            }
        }
    }
}
