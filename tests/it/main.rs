//! duckgate's integration tests: one binary, one module per suite, grouped
//! by what a suite needs installed (its tier). Plain `cargo test` runs the
//! `core` tier; every other tier's tests are `#[ignore]`d with the reason,
//! and `scripts/test` installs what the selected tiers need and runs them
//! (`scripts/test --tier venv,pg`; no argument: every tier). See
//! docs/testing.md.

mod browser;
mod common;
mod core;
mod image;
mod load;
mod pg;
mod venv;
