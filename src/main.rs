//! The `duckgate` binary: [`duckgate::cli::main`] (the configuration,
//! logging, serving until SIGINT or SIGTERM), which lives in the library so
//! that the gateway's async code is compiled once there, on jemalloc.

/// jemalloc for the whole process: its `malloc` and `free` are the ones
/// every library in it calls, DuckDB's C++ `new` included (DuckDB's buffer
/// pool has an allocator of its own). Against glibc's malloc it took 12 µs
/// (8%) off the CPU of a small query, and it needs none of the thresholds
/// that kept glibc's heap from holding freed Arrow buffers (BENCHMARKS.md,
/// row 11). `MALLOC_CONF` tunes it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    duckgate::cli::main()
}
