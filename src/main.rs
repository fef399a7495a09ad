//! The `duckgate` binary: malloc's thresholds, then [`duckgate::cli::main`]
//! (the configuration, logging, serving until SIGINT or SIGTERM), which lives
//! in the library so that the gateway's async code is compiled once there.

/// glibc's malloc adapts its mmap threshold to the largest block freed and
/// its trim threshold to twice that, so after the first large result every
/// Arrow buffer comes from the heap and freed ones are kept: a 10M-row
/// Parquet statement page peaked at 246 MB, 30M rows at 337 MB. Fixed
/// thresholds (blocks of 1 MiB and more mapped and unmapped, the heap
/// trimmed past 16 MiB free) keep it at 135 and 141 MB. An operator's own
/// `MALLOC_MMAP_THRESHOLD_`/`MALLOC_TRIM_THRESHOLD_` win.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none()
        && std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none()
    {
        // SAFETY: mallopt only sets allocator parameters; called before
        // any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
        }
    }
}

fn main() -> std::process::ExitCode {
    tune_malloc();
    duckgate::cli::main()
}
