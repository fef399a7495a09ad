//! Suites that need PostgreSQL 15 (shared state, lake catalogs) and the test venv: `scripts/test --tier pg`.

mod lake;
mod liveness;
mod monitoring;
mod query_ids;
mod replicas;
mod rolling_restart;
mod shared_state;
mod state_connections;
mod state_tls;
mod statement_handoff;
