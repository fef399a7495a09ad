// The C ABI of duckgate's C++ shims: every function Rust calls, declared
// once. Each shim includes this header, so a definition that drifts from it
// does not compile (C linkage cannot overload); the Rust declarations are
// checked against it by a unit test (`engine::shims_abi`). Change both in
// the same commit. Handles are DuckDB's: a `duckdb_database` or a
// `duckdb_connection` (its C API wrappers) as `void *`, a `duckdb_config` as
// `void *`; text returned as `char *` is freed by the shim's own `_free`.
#ifndef DUCKGATE_SHIMS_H
#define DUCKGATE_SHIMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// memory.cpp: DuckDB's allocations counted and held under a ceiling.
int duckgate_count_memory(void *config);
void duckgate_set_memory_ceiling(uint64_t bytes);
void duckgate_memory_usage(uint64_t *bytes, uint64_t *limit, uint64_t *refusals);
int duckgate_memory_budget(void *database, uint64_t *available, uint64_t *buffer_pool);

// nesting.cpp: thread stacks, and the JSON depth cap.
int duckgate_set_default_thread_stack(uint64_t bytes);
uint64_t duckgate_current_thread_stack(void);
int duckgate_cap_json_depth(void *connection, uint64_t max_depth);

// pipe.cpp: the file system DuckDB's COPY writes answers through.
typedef int (*duckgate_pipe_open_fn)(uint64_t token, uint64_t connection_id);
typedef int (*duckgate_pipe_write_fn)(uint64_t token, uint64_t connection_id, const uint8_t *data, uint64_t len);
int duckgate_pipe_register(void *database, uint64_t token, duckgate_pipe_open_fn open_fn,
                           duckgate_pipe_write_fn write_fn);
int duckgate_copy_matches(const char *copy_sql, const char *select_sql, const char *target, const char *format);
int duckgate_limit_wraps(const char *wrapper_sql, const char *select_sql);

// progress.cpp: a running query's progress.
int duckgate_track_progress(void *database, uint64_t connection_id, bool **flag);
int duckgate_query_progress(void *database, uint64_t connection_id, double *percentage, uint64_t *rows_processed,
                            uint64_t *total_rows);

// s3_paths.cpp: the check in front of httpfs's S3 file system.
int duckgate_guard_s3_paths(void *database);

// secrets.cpp: secrets installed on the control connection.
char *duckgate_install_secret(void *connection, const char *type, const char *name, const char *const *keys,
                              const char *const *values, size_t n, const char *const *scope, size_t n_scope);
char *duckgate_logging_off(void *connection);
void duckgate_secrets_free(char *text);

// errors.cpp: where DuckDB's error about a client's SQL points, in that SQL.
int duckgate_error_place(const char *sql, uint64_t position, uint64_t *offset, char **excerpt);
int duckgate_excerpt_position(const char *sql, const char *excerpt, uint64_t max_line, uint64_t *position);
void duckgate_errors_free(char *text);

// priority.cpp: DuckDB's wait for its own tasks, made to yield; 0 and the
// statements it ran while the binary's wait is in use, 1 if DuckDB's own is.
int duckgate_execute_count(uint64_t *executed);
// priority.cpp: DuckDB's scheduler threads set to `background` (below 0:
// unchanged); `threads` gets their count with the caller's. 0 when done.
int duckgate_scheduler_threads(void *database, int64_t background, int32_t *threads);

// policy/: roles' row filters and column masks, applied to optimized plans.
int duckgate_policy_register(void *database);
char *duckgate_policy_set(void *database, uint64_t connection_id, const char *spec, size_t len);
char *duckgate_policy_check(void *connection, const char *spec, size_t len);
void duckgate_policy_free(char *text);

// guard/describe/: DuckDB's parse of a statement, what its plan calls and scans,
// result types, catalog questions.
char *duckgate_plan_names(void *connection, const char *sql);
char *duckgate_describe_sql(void *connection, const char *sql);
char *duckgate_system_name(void *connection, const char *name);
char *duckgate_schema_has(void *connection, const char *schema, const char *name);
void duckgate_describe_free(char *text);

#ifdef __cplusplus
}
#endif

#endif
