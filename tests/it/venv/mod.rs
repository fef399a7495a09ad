//! Suites that need the test venv (Python DuckDB 1.5.5 for reference answers, the S3/STS emulation, the extensions): `scripts/test --tier venv`.

mod allowlist;
mod clients;
mod conformance;
mod deploy;
mod faults;
mod flight;
mod flight_sqlalchemy;
mod guard_corpus;
mod httpfs_settings;
mod lake_grants;
mod nesting;
mod oidc;
mod openapi_client;
mod parquet;
mod replay;
mod s3_capacity;
mod s3_globs;
mod s3_rotation;
mod s3_sources;
mod s3_tenants;
mod secret_install;
mod security;
mod session_policy;
mod signed_urls;
mod sts_tls;
mod url_query;
