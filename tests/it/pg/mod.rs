//! Suites that need PostgreSQL 15 (shared state, lake catalogs) and the test venv: `scripts/test --tier pg`.

mod lake;
mod monitoring;
mod query_ids;
mod replicas;
mod shared_state;
mod state_connections;
mod state_tls;
mod statement_handoff;
