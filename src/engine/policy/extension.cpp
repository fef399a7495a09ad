// Row filters and column masks of a confined caller, applied to the plan
// DuckDB runs.
//
// A role may filter the rows of a table it reads (`tenant_id =
// claim('tenant')`) and mask columns (`email = "NULL"`). The gateway installs
// the caller's policy on the pooled connection before it prepares anything
// (`duckgate_policy_set`, a `ClientContextState` of that connection), and an
// optimizer extension of the database applies it to every plan the
// connection optimizes while it is installed:
//
// - Before DuckDB's optimizers run, every scan of a catalog table gets the
//   policy decision for that table, found by its bound (resolved) name, so
//   views, CTEs, subqueries and lake tables are covered: DuckDB's binder has
//   expanded them all into scans. A scan of a table the policy does not
//   list is refused (fail closed: the gateway lists every table the
//   statement reads). A filtered scan becomes
//       Projection (masks; the scan's old table index) <- Filter (policy,
//       with a projection map) <- Get (a new table index)
//   so the rest of the plan, which refers to the scan's columns by the old
//   index, now reads the masked values, and no binding is rewritten.
// - Nothing the client wrote is evaluated on a row the filter removes.
//   DuckDB's filter pushdown and filter pull-up stop at a filter that has a
//   projection map (they treat it as a barrier: `PushdownFilter`,
//   `PullupFilter`), so the client's predicates end above the policy filter
//   instead of in it or in the scan; the join order optimizer treats a
//   projection as a relation of its own and optimizes what is below it
//   alone (one relation: nothing to reorder), so it does not take the
//   policy's predicates into the join graph either.
// - The policy's own comparisons of a column with a constant go into the
//   scan of a DuckDB table as table filters (`PushIntoScan`), not into the
//   barrier: they are operator SQL and claim values, so the scan may
//   evaluate them on every row and skip row groups by their min/max, and
//   a comparison the table's statistics prove true costs nothing. The
//   barrier keeps the rest of the filter (TRUE when nothing is left).
// - After DuckDB's optimizers ran, the plan is checked: every scan of a
//   filtered table must still sit directly under a filter this extension
//   put there (or hold the whole filter as table filters), with no filter
//   pushed into the scan but the policy's own table filters and DuckDB's
//   dynamic bounds, and every table filter of the policy still there or
//   proven true by the table's statistics. Otherwise the statement fails
//   (a DuckDB upgrade that moves filters differently breaks loudly, not
//   silently).
//
// The same holds for DuckDB's catalog listings (`duckdb_tables()` and the
// others the document's `listings` name): a confined caller's scan of one is filtered to
// the objects its roles let it see (the gateway writes those filters), so
// `information_schema`, `SHOW TABLES` and `DESCRIBE` answer from its part of
// the catalog; a listing the document does not name is refused.
//
// Claim values are DuckDB values put in the policy's parse tree in place of
// `claim('name')` calls (strings, numbers, booleans, lists, NULL when the
// caller has no such claim), never text spliced into SQL. A policy is
// operator text; it is bound as `SELECT <filter>, <masks> FROM <table>`, and
// must plan to exactly a projection over that table's scan (no subqueries,
// aggregates or windows).

#include "policy.hpp"

using namespace duckdb;

namespace duckgate_policy {

// The optimizer extension, shaped as DuckDB's own optimizer-extension demo
// (`test/extension/loadable_extension_optimizer_demo.cpp`): a class whose
// constructor names its functions.
class PolicyExtension : public OptimizerExtension {
public:
	PolicyExtension() {
		pre_optimize_function = PreOptimize;
		optimize_function = PostOptimize;
	}
};

} // namespace duckgate_policy


extern "C" {

// Registers the policy optimizer extension with the database. 0 on success.
int duckgate_policy_register(void *database) {
	try {
		auto wrapper = static_cast<DatabaseWrapper *>(database);
		if (!wrapper || !wrapper->database) {
			return -1;
		}
		OptimizerExtension::Register(DBConfig::GetConfig(*wrapper->database->instance),
		                             duckgate_policy::PolicyExtension());
		return 0;
	} catch (...) {
		return -1;
	}
}

// Installs the policy document `spec` (`len` bytes) on the connection with
// this id, or removes it (`spec` NULL). Call it while the connection runs
// nothing. NULL on success, else a malloc'd error text (free with
// `duckgate_policy_free`).
char *duckgate_policy_set(void *database, uint64_t connection_id, const char *spec, size_t len) {
	try {
		auto context = duckgate_shim::FindClientContext(database, connection_id);
		if (!context) {
			return duckgate_shim::CopyOut("no such connection");
		}
		if (!spec) {
			context->registered_state->Remove(duckgate_policy::STATE_KEY);
			return nullptr;
		}
		// Without the optimizer (or its extensions) nothing would apply it.
		auto &config = DBConfig::GetConfig(*context);
		if (!ClientConfig::GetConfig(*context).enable_optimizer ||
		    config.options.disabled_optimizers.count(OptimizerType::EXTENSION)) {
			return duckgate_shim::CopyOut("DuckDB's optimizer extensions are disabled: row policies cannot be applied");
		}
		auto state = duckgate_policy::ReadSpec(spec, len);
		// Insert keeps an existing entry: the old policy goes first.
		context->registered_state->Remove(duckgate_policy::STATE_KEY);
		context->registered_state->Insert(duckgate_policy::STATE_KEY, std::move(state));
		return nullptr;
	} catch (std::exception &ex) {
		ErrorData error(ex);
		return duckgate_shim::CopyOut(error.RawMessage());
	} catch (...) {
		return duckgate_shim::CopyOut("the policy could not be installed");
	}
}

// Binds each table policy of `spec` (claims as in the document) on
// `connection` (a `duckdb::Connection*`), in a transaction of its own: NULL
// when all bind, else a malloc'd error naming what does not.
char *duckgate_policy_check(void *connection, const char *spec, size_t len) {
	try {
		auto conn = reinterpret_cast<Connection *>(connection);
		auto &context = *conn->context;
		auto state = duckgate_policy::ReadSpec(spec, len);
		context.RunFunctionInTransaction([&]() {
			for (auto &t : state->tables) {
				if (!t.function) {
					// The table must exist (a view has no scan to filter).
					Catalog::GetEntry<TableCatalogEntry>(context, t.catalog, t.schema, t.name);
				}
				duckgate_policy::Bind(context, t, state->claims);
			}
		});
		return nullptr;
	} catch (std::exception &ex) {
		ErrorData error(ex);
		return duckgate_shim::CopyOut(error.RawMessage());
	} catch (...) {
		return duckgate_shim::CopyOut("the policy could not be bound");
	}
}

void duckgate_policy_free(char *text) {
	duckgate_shim::FreeText(text);
}

} // extern "C"
