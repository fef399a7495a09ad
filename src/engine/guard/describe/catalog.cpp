// Catalog questions the guard asks on a pooled connection: whether a name is
// DuckDB's own, whether a schema holds a name.

#include "describe.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_guard {

// Runs a catalog query of one boolean with `values` bound and answers "1",
// "0", or NULL when it could not run. Materialized: a streaming result would
// leave its transaction open on this connection, and the guard's next plan
// would see the catalog as it was then. Never throws.
char *CatalogExists(void *connection, const char *sql, vector<Value> values) {
	try {
		auto conn = reinterpret_cast<Connection *>(connection);
		auto prepared = conn->Prepare(sql);
		if (prepared->HasError()) {
			return nullptr;
		}
		auto result = prepared->Execute(values, false);
		if (result->HasError()) {
			return nullptr;
		}
		auto chunk = result->Fetch();
		if (!chunk || chunk->size() != 1) {
			return nullptr;
		}
		auto found = chunk->GetValue(0, 0).GetValue<bool>();
		return duckgate_shim::CopyOut(found ? "1" : "0", 1);
	} catch (...) {
		return nullptr;
	}
}

// C linkage, declared in shims.h: the same functions wherever declared.
extern "C" {

// Whether `name` (case-insensitively) names anything of DuckDB's own: a
// function, table function, macro, view, type or schema of the system
// catalog. A client object of that name would change what the name means
// for every other client. "1", "0", or NULL when the catalog could not be
// read (the guard then refuses). Never throws.
char *duckgate_system_name(void *connection, const char *name) {
	try {
		return CatalogExists(
		    connection,
		    "SELECT EXISTS (SELECT 1 FROM duckdb_functions() WHERE database_name = 'system' AND "
		    "lower(function_name) = lower($1)) OR EXISTS (SELECT 1 FROM duckdb_views() WHERE database_name = "
		    "'system' AND lower(view_name) = lower($1)) OR EXISTS (SELECT 1 FROM duckdb_types() WHERE "
		    "database_name = 'system' AND lower(type_name) = lower($1)) OR EXISTS (SELECT 1 FROM "
		    "duckdb_schemas() WHERE database_name IN ('system', 'temp') AND lower(schema_name) = lower($1))",
		    {Value(string(name))});
	} catch (...) {
		return nullptr;
	}
}

// Whether the schema `schema` of the connection's default database holds a
// table, view, sequence, type, index or macro named `name`
// (case-insensitively): the guard's view of where an unqualified name
// resolves (see `guard::check_schema`). "1", "0", or NULL when the catalog
// could not be read. Never throws.
char *duckgate_schema_has(void *connection, const char *schema, const char *name) {
	try {
		return CatalogExists(
		    connection,
		    "SELECT EXISTS (SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() AND "
		    "lower(schema_name) = lower($1) AND lower(table_name) = lower($2)) OR EXISTS (SELECT 1 FROM "
		    "duckdb_views() WHERE database_name = current_database() AND lower(schema_name) = lower($1) AND "
		    "lower(view_name) = lower($2)) OR EXISTS (SELECT 1 FROM duckdb_sequences() WHERE database_name = "
		    "current_database() AND lower(schema_name) = lower($1) AND lower(sequence_name) = lower($2)) OR "
		    "EXISTS (SELECT 1 FROM duckdb_types() WHERE database_name = current_database() AND "
		    "lower(schema_name) = lower($1) AND lower(type_name) = lower($2)) OR EXISTS (SELECT 1 FROM "
		    "duckdb_indexes() WHERE database_name = current_database() AND lower(schema_name) = lower($1) AND "
		    "lower(index_name) = lower($2)) OR EXISTS (SELECT 1 FROM duckdb_functions() WHERE database_name = "
		    "current_database() AND lower(schema_name) = lower($1) AND lower(function_name) = lower($2))",
		    {Value(string(schema)), Value(string(name))});
	} catch (...) {
		return nullptr;
	}
}

} // extern "C"

} // namespace duckgate_guard
