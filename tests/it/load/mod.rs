//! Load and fuzz suites (k6, schemathesis, the quick benchmark): `scripts/test --tier load`.

mod bench_quick;
mod k6_soak;
mod schemathesis;
