//! S3 credentials: where they come from (`source`), how they are installed
//! into DuckDB (`sql`), who keeps them fresh (`rotator`), and the one retry
//! of a query S3 rejected as expired (`retry`); the AWS SDK's HTTPS client
//! that STS and the S3 spool share (`http`).

pub mod http;
pub mod retry;
pub mod rotator;
pub mod source;
pub mod sql;

pub use rotator::Rotator;
