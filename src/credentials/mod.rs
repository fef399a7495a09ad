//! S3 credentials: where they come from (`source`), how they are installed
//! into DuckDB (`sql`), and who keeps them fresh (`rotator`).

pub mod rotator;
pub mod source;
pub mod sql;

pub use rotator::Rotator;
