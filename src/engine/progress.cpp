// DuckDB's own progress of a running query, for `GET /queries` and
// `GET /statements/{id}`.
//
// DuckDB keeps a query's progress (percentage, rows processed, rows to
// process) in its ClientContext, updated while the query executes when the
// connection's progress bar is enabled. The C API reads it only through the
// connection handle (`duckdb_query_progress`), which duckdb-rs does not
// expose; these functions find a connection's context by its id (DuckDB's
// `current_connection_id()`) in the database's connection manager, which
// hands out shared pointers under its own lock, so a context is never read
// after it was destroyed.

#include "shims.h"
#include "shim_context.hpp"
#include "duckdb.hpp"
#include "duckdb/main/capi/capi_internal.hpp"
#include "duckdb/main/client_config.hpp"
#include "duckdb/main/client_context.hpp"
#include "duckdb/main/connection_manager.hpp"
#include "duckdb/main/database.hpp"

using namespace duckdb;

extern "C" {

// Turns on progress tracking (never printing) for the connection with this
// id. Call it while the connection runs nothing. 0 on success; `flag` then
// points at the connection's switch, which lives as long as the connection
// and may be written while it runs nothing (a short query is not worth the
// progress bookkeeping DuckDB does after every task).
int duckgate_track_progress(void *database, uint64_t connection_id, bool **flag) {
	try {
		auto context = duckgate_shim::FindClientContext(database, connection_id);
		if (!context) {
			return 1;
		}
		auto &config = ClientConfig::GetConfig(*context);
		config.enable_progress_bar = true;
		config.print_progress_bar = false;
		*flag = &config.enable_progress_bar;
		return 0;
	} catch (...) {
		return 2;
	}
}

// The progress of what the connection with this id runs now: percentage
// (-1 when DuckDB cannot tell), rows processed and rows to process. 0 on
// success.
int duckgate_query_progress(void *database, uint64_t connection_id, double *percentage, uint64_t *rows_processed,
                            uint64_t *total_rows) {
	try {
		auto context = duckgate_shim::FindClientContext(database, connection_id);
		if (!context) {
			return 1;
		}
		auto progress = context->GetQueryProgress();
		*percentage = progress.GetPercentage();
		*rows_processed = progress.GetRowsProcesseed();
		*total_rows = progress.GetTotalRowsToProcess();
		return 0;
	} catch (...) {
		return 2;
	}
}

} // extern "C"
