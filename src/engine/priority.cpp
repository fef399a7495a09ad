// DuckDB's wait for its own tasks, made to yield (see priority.rs).
//
// A statement's caller runs its tasks itself, and DuckDB's scheduler threads
// take them too. When they hold every task left, DuckDB's
// `PendingQueryResult::Execute` asks again at once, in a loop, until they
// finish. The gateway runs those scheduler threads at a higher niceness than
// the async workers a short read runs on (`DUCKGATE_QUERY_NICE`): when one
// lands on the core where the worker spins, the worker keeps the core it
// waits for. Measured: a fifth of a `SELECT 42`'s CPU in the gateway.
//
// The official library calls DuckDB's C API through its PLT and duckdb-rs
// executes through these two functions, so the binary's definitions take
// their place. They do what DuckDB's do (`PreparedStatement::Execute`: the
// pending query, its tasks, then the result), except that a caller with no
// task to run yields its core (`sched_yield`) before it asks again, and
// that an exception becomes an error result rather than crossing the C
// ABI. A DuckDB built from source is linked statically: no interposition,
// DuckDB's own loop.
#include <atomic>
#include <sched.h>

#include "shims.h"

#include "duckdb.hpp"
#include "duckdb/main/capi/capi_internal.hpp"
#include "duckdb/main/database.hpp"
#include "duckdb/main/pending_query_result.hpp"
#include "duckdb/main/prepared_statement.hpp"
#include "duckdb/parallel/task_scheduler.hpp"

namespace {

std::atomic<uint64_t> executions {0};

#ifdef DUCKGATE_INTERPOSE_EXECUTE
duckdb::unique_ptr<duckdb::QueryResult> ExecuteYielding(duckdb::PreparedStatementWrapper &wrapper, bool stream) {
	executions.fetch_add(1, std::memory_order_relaxed);
	auto pending = wrapper.statement->PendingQuery(wrapper.values, stream);
	if (pending->HasError()) {
		return duckdb::make_uniq<duckdb::MaterializedQueryResult>(pending->GetErrorObject());
	}
	duckdb::PendingExecutionResult state;
	while (!duckdb::PendingQueryResult::IsResultReady(state = pending->ExecuteTask())) {
		if (state == duckdb::PendingExecutionResult::BLOCKED) {
			// As DuckDB's own loop: sleep until a blocked task is rescheduled.
			pending->WaitForTask();
		} else if (state == duckdb::PendingExecutionResult::NO_TASKS_AVAILABLE) {
			sched_yield();
		}
	}
	// A failed execution has closed its pending result: `Execute` would
	// throw rather than hand the error back.
	if (pending->HasError()) {
		return duckdb::make_uniq<duckdb::MaterializedQueryResult>(pending->GetErrorObject());
	}
	return pending->Execute();
}

duckdb_state Execute(duckdb_prepared_statement prepared_statement, duckdb_result *out_result, bool stream) {
	auto wrapper = reinterpret_cast<duckdb::PreparedStatementWrapper *>(prepared_statement);
	if (!wrapper || !wrapper->statement || wrapper->statement->HasError()) {
		return DuckDBError;
	}
	duckdb::unique_ptr<duckdb::QueryResult> result;
	try {
		result = ExecuteYielding(*wrapper, stream);
	} catch (std::exception &ex) {
		result = duckdb::make_uniq<duckdb::MaterializedQueryResult>(duckdb::ErrorData(ex));
	} catch (...) {
		result = duckdb::make_uniq<duckdb::MaterializedQueryResult>(
		    duckdb::ErrorData(duckdb::ExceptionType::UNKNOWN_TYPE, "unknown error while executing a statement"));
	}
	return duckdb::DuckDBTranslateResult(std::move(result), out_result);
}
#endif

} // namespace

#ifdef DUCKGATE_INTERPOSE_EXECUTE
extern "C" duckdb_state duckdb_execute_prepared(duckdb_prepared_statement prepared_statement,
                                                duckdb_result *out_result) {
	return Execute(prepared_statement, out_result, false);
}

extern "C" duckdb_state duckdb_execute_prepared_streaming(duckdb_prepared_statement prepared_statement,
                                                          duckdb_result *out_result) {
	return Execute(prepared_statement, out_result, true);
}
#endif

extern "C" int duckgate_execute_count(uint64_t *executed) {
	*executed = executions.load(std::memory_order_relaxed);
#ifdef DUCKGATE_INTERPOSE_EXECUTE
	return 0;
#else
	return 1;
#endif
}

// DuckDB's scheduler threads, set to `background` (below 0: left as they
// are); `threads` gets the scheduler's count, the caller's thread included
// (see threads.rs). `SetThreads` keeps the difference of its two numbers,
// the background threads; `RelaunchThreads` joins the threads it stops
// (each finishes the task it runs) and starts the ones it adds, which
// inherit the calling thread's niceness.
extern "C" int duckgate_scheduler_threads(void *database, int64_t background, int32_t *threads) {
	try {
		auto wrapper = static_cast<duckdb::DatabaseWrapper *>(database);
		if (!wrapper || !wrapper->database) {
			return 1;
		}
		auto &scheduler = duckdb::TaskScheduler::GetScheduler(*wrapper->database->instance);
		if (background >= 0) {
			scheduler.SetThreads(static_cast<duckdb::idx_t>(background) + 1, 1);
			scheduler.RelaunchThreads();
		}
		*threads = scheduler.NumberOfThreads();
		return 0;
	} catch (...) {
		return 2;
	}
}
