// The row-policy shim's shared declarations (see extension.cpp for what it
// does and how): the policy document as read, the state a connection holds
// while a policy is installed, and the steps the other files share.
#ifndef DUCKGATE_POLICY_HPP
#define DUCKGATE_POLICY_HPP

#include "../shims.h"
#include "../shim_context.hpp"
#include "../shim_support.hpp"
#include "duckdb.hpp"
#include "duckdb/main/client_context.hpp"
#include "duckdb/main/client_context_state.hpp"
#include "duckdb/main/connection.hpp"
#include "duckdb/main/connection_manager.hpp"
#include "duckdb/main/capi/capi_internal.hpp"
#include "duckdb/main/config.hpp"
#include "duckdb/main/database.hpp"
#include "duckdb/optimizer/optimizer.hpp"
#include "duckdb/optimizer/optimizer_extension.hpp"
#include "duckdb/parser/keyword_helper.hpp"
#include "duckdb/parser/parser.hpp"
#include "duckdb/parser/parsed_expression_iterator.hpp"
#include "duckdb/parser/expression/constant_expression.hpp"
#include "duckdb/parser/expression/function_expression.hpp"
#include "duckdb/parser/query_node/select_node.hpp"
#include "duckdb/parser/statement/select_statement.hpp"
#include "duckdb/planner/binder.hpp"
#include "duckdb/planner/planner.hpp"
#include "duckdb/planner/expression_iterator.hpp"
#include "duckdb/planner/expression/bound_cast_expression.hpp"
#include "duckdb/planner/expression/bound_columnref_expression.hpp"
#include "duckdb/planner/operator/logical_filter.hpp"
#include "duckdb/planner/operator/logical_get.hpp"
#include "duckdb/planner/operator/logical_comparison_join.hpp"
#include "duckdb/execution/operator/join/join_filter_pushdown.hpp"
#include "duckdb/planner/filter/dynamic_filter.hpp"
#include "duckdb/planner/filter/conjunction_filter.hpp"
#include "duckdb/planner/filter/constant_filter.hpp"
#include "duckdb/planner/filter/null_filter.hpp"
#include "duckdb/planner/filter/optional_filter.hpp"
#include "duckdb/planner/expression/bound_comparison_expression.hpp"
#include "duckdb/planner/expression/bound_conjunction_expression.hpp"
#include "duckdb/planner/expression/bound_constant_expression.hpp"
#include "duckdb/planner/expression/bound_operator_expression.hpp"
#include "duckdb/execution/expression_executor.hpp"
#include "duckdb/storage/statistics/base_statistics.hpp"
#include "duckdb/planner/table_filter.hpp"
#include "duckdb/planner/operator/logical_projection.hpp"
#include "duckdb/catalog/catalog_entry/table_catalog_entry.hpp"
#include "duckdb/common/types/value.hpp"
#include "yyjson.hpp"

#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_policy {

const char *const STATE_KEY = "duckgate_policy";


// One table the statement reads (or catalog function it scans: `function`,
// named by `name`), and what the caller's roles make of it.
struct TablePolicy {
	bool function = false;
	string catalog;
	string schema;
	string name;
	// The row filter (operator SQL, `claim()` calls in it), if any.
	bool filtered = false;
	string filter;
	// Masked columns: name, mask (operator SQL).
	vector<std::pair<string, string>> masks;

	bool Applies() const {
		return filtered || !masks.empty();
	}
};

// The policy's own comparisons put into one scan as DuckDB table filters
// (see `ScanFilter`), for the check after DuckDB's optimizers.
struct ScanPolicy {
	// Column (its index in the table) -> a table filter put there.
	vector<std::pair<idx_t, unique_ptr<TableFilter>>> filters;
	// Whether nothing of the policy's filter was left to evaluate above the
	// scan: the scan returns only rows the filter passes.
	bool whole = false;
	// For a scan the policy's filter stays above (a lake's): that filter as
	// table filters, when each of its conjuncts is one. DuckDB's statistics
	// propagation removes the filter when the scan's statistics prove it
	// holds for every row; the check after the optimizers proves it again
	// from the same statistics (`Proved`).
	vector<std::pair<idx_t, unique_ptr<TableFilter>>> provable;
};

// A caller's claims by exact name and dotted path (`org.tenant`), and the
// names that name two values (a claim literally named `org.tenant` beside
// an object `org` holding `tenant`): a policy that reads one of those does
// not apply, whichever the token lists first.
struct Claims {
	std::unordered_map<string, Value> values;
	std::unordered_set<string> ambiguous;
};

struct PolicyState : public ClientContextState {
	vector<TablePolicy> tables;
	// DuckDB's catalog functions a confined caller may scan, each only
	// through the listing policy the gateway sends for it (`functions`):
	// `information_schema`, `pg_catalog`, `SHOW TABLES` and the rest are
	// views and queries over these, so they list only what the caller may
	// see. The gateway sends the list (`listings`, its
	// `guard::access::LISTINGS`); a scan of one the statement's document
	// does not filter is refused.
	vector<string> listings;

	bool IsListing(const string &function) const {
		for (auto &name : listings) {
			if (function == name) {
				return true;
			}
		}
		return false;
	}
	// The caller's claims, as DuckDB values, by their exact name (and
	// dotted path): JSON names are case-sensitive, and `TENANT` is not the
	// claim `tenant` a policy names.
	Claims claims;
	// Filters put into the plan being optimized, for the check after
	// DuckDB's optimizers.
	std::unordered_set<LogicalOperator *> inserted;
	// Scans of the plan being optimized given table filters of the policy,
	// by their operator.
	std::unordered_map<LogicalOperator *, ScanPolicy> scans;
	// The joins' dynamic filter sets taken out of filtered scans by the
	// check after the optimizers (`DropClientFilters`).
	std::unordered_set<DynamicTableFilterSet *> dropped;

	const TablePolicy *Find(TableCatalogEntry &table) const {
		auto catalog = table.ParentCatalog().GetName();
		for (auto &t : tables) {
			if (!t.function && t.catalog == catalog && t.schema == table.schema.name && t.name == table.name) {
				return &t;
			}
		}
		return nullptr;
	}

	const TablePolicy *FindFunction(const string &function) const {
		for (auto &t : tables) {
			if (t.function && t.name == function) {
				return &t;
			}
		}
		return nullptr;
	}
};

// A policy bound against its table: the filter (if any) and each mask,
// referring to the columns of `scan` by (scan's table index, position in its
// column ids).
struct BoundPolicy {
	unique_ptr<Expression> filter;
	// Column index in the table -> mask.
	vector<std::pair<idx_t, unique_ptr<Expression>>> masks;
	idx_t scan_index = 0;
	vector<ColumnIndex> scan_columns;
};

Value ToValue(yyjson_val *v);
void AddClaims(yyjson_val *obj, const string &prefix, Claims &out, idx_t depth);
string Text(yyjson_val *obj, const char *key);
shared_ptr<PolicyState> ReadSpec(const char *spec, size_t len);
void BindClaims(unique_ptr<ParsedExpression> &expr, const Claims &claims);
string Qualified(const string &catalog, const string &schema, const string &name);
BoundPolicy Bind(ClientContext &context, const TablePolicy &policy, const Claims &claims);
void Retarget(unique_ptr<Expression> &expr, const BoundPolicy &bound, LogicalGet &get, idx_t index);
bool ComparedInScan(const LogicalType &type);
bool PolicyColumn(const Expression &expr, const BoundPolicy &bound, LogicalGet &get, idx_t &column);
unique_ptr<TableFilter> ScanFilter(ClientContext &context, const Expression &conjunct, const BoundPolicy &bound,
                                   LogicalGet &get, idx_t &column);
unique_ptr<BaseStatistics> ColumnStatistics(ClientContext &context, LogicalGet &get, idx_t column);
vector<std::pair<idx_t, unique_ptr<TableFilter>>> Provable(ClientContext &context, BoundPolicy &bound,
                                                           LogicalGet &get);
ScanPolicy PushIntoScan(ClientContext &context, BoundPolicy &bound, LogicalGet &get, idx_t index);
unique_ptr<Expression> Try(unique_ptr<Expression> expr);
unique_ptr<LogicalOperator> Wrap(OptimizerExtensionInput &input, PolicyState &state, const TablePolicy &policy,
                                 unique_ptr<LogicalOperator> op);
void Apply(OptimizerExtensionInput &input, PolicyState &state, unique_ptr<LogicalOperator> &op);
void PreOptimize(OptimizerExtensionInput &input, unique_ptr<LogicalOperator> &plan);
bool Optional(const TableFilter &filter);
bool KeepRequired(unique_ptr<TableFilter> &filter);
void DropClientFilters(LogicalGet &get, std::unordered_set<DynamicTableFilterSet *> &dropped);
void ForgetDropped(LogicalOperator &op, const std::unordered_set<DynamicTableFilterSet *> &dropped);
bool PolicySafe(const TableFilter &filter);
bool Holds(const TableFilter &filter, const TableFilter &own);
bool Accepted(const TableFilter &filter, idx_t column, const ScanPolicy *scan);
bool Proved(ClientContext &context, LogicalGet &get, const ScanPolicy &scan);
bool Kept(ClientContext &context, LogicalGet &get, const ScanPolicy &scan);
bool UnderPolicy(PolicyState &state, LogicalOperator &op, TableCatalogEntry &table);
bool LateMaterialized(PolicyState &state, LogicalGet &get, LogicalOperator *parent, TableCatalogEntry &table);
void Check(ClientContext &context, PolicyState &state, LogicalOperator &op, LogicalOperator *parent);
void PostOptimize(OptimizerExtensionInput &input, unique_ptr<LogicalOperator> &plan);

} // namespace duckgate_policy

#endif