//! Suites that need nothing installed: plain `cargo test` runs them.

mod auth;
mod client_schema;
mod dockerfile;
mod docs;
mod drain;
pub(super) mod grants;
mod guard_kinds;
mod inline;
mod layers;
mod metrics;
mod openapi;
mod policies;
mod pool_health;
mod probe_listener;
mod problems;
mod queries;
mod query_api;
mod reload;
mod role_quotas;
mod scripts;
mod shedding;
mod sources;
mod statements;
mod storage_faults;
mod tenant_channels;
mod token_share;
mod transport;
