//! Where a statement is: its states and their one name everywhere (the
//! status document, the shared state's column, the metrics).

/// Where a statement is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[schema(as = StatementState)]
pub enum State {
    /// Waiting for its share of the pool.
    Queued,
    /// Holding its share of the pool: waiting for a connection or executing.
    Running,
    /// Its result is in the spool.
    Succeeded,
    /// Ended with an error (kept with the statement).
    Failed,
    /// Stopped by `DELETE /statements/{id}` or `DELETE /queries/{id}`.
    Cancelled,
    /// Finished longer ago than the TTL: its result is gone.
    Expired,
    /// Its replica stopped before it finished (with shared state only).
    Lost,
}

impl State {
    /// Every state, in declaration order (`state as usize` indexes it).
    pub const ALL: [State; 7] = [
        State::Queued,
        State::Running,
        State::Succeeded,
        State::Failed,
        State::Cancelled,
        State::Expired,
        State::Lost,
    ];

    /// Its name in status documents, the shared state's `state` column and
    /// the `duckgate_statements` gauge's label (serde's name of it).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Running => "running",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
            State::Expired => "expired",
            State::Lost => "lost",
        }
    }

    /// The state of this name, if it is one.
    pub fn parse(name: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the statement has ended (neither queued nor running).
    pub fn finished(self) -> bool {
        !matches!(self, State::Queued | State::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::State;

    #[test]
    fn a_state_has_one_name_everywhere() {
        for state in State::ALL {
            let json = serde_json::to_value(state).unwrap();
            assert_eq!(json.as_str(), Some(state.as_str()));
            assert_eq!(State::parse(state.as_str()), Some(state));
            assert_eq!(State::ALL[state as usize], state);
        }
        assert_eq!(State::parse("done"), None);
    }
}
