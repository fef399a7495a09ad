// C++ helpers shared by more than one shim, not part of the C ABI (that is
// `shims.h`). The shims compile as one translation unit (build.rs), but each
// includes what it uses, so none relies on another being included first;
// the include guard keeps the definitions single, and `inline` keeps them
// legal should the shims ever compile apart.
#ifndef DUCKGATE_SHIM_CONTEXT_HPP
#define DUCKGATE_SHIM_CONTEXT_HPP

#include <cstdint>

#include "duckdb.hpp"
#include "duckdb/main/capi/capi_internal.hpp"
#include "duckdb/main/client_context.hpp"
#include "duckdb/main/connection_manager.hpp"
#include "duckdb/main/database.hpp"

namespace duckgate_shim {

// The client context of the connection with DuckDB's id `connection_id`
// (`current_connection_id()`) in `database` (a `duckdb_database`'s
// wrapper), or null. The connection manager hands out shared pointers under
// its own lock, so the context outlives its use even if the connection
// closes meanwhile.
inline duckdb::shared_ptr<duckdb::ClientContext> FindClientContext(void *database, uint64_t connection_id) {
	auto wrapper = static_cast<duckdb::DatabaseWrapper *>(database);
	if (!wrapper || !wrapper->database) {
		return nullptr;
	}
	auto &instance = *wrapper->database->instance;
	for (auto &context : duckdb::ConnectionManager::Get(instance).GetConnectionList()) {
		if (context && context->GetConnectionId() == connection_id) {
			return context;
		}
	}
	return nullptr;
}

} // namespace duckgate_shim

#endif
