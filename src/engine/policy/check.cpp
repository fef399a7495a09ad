// After DuckDB's optimizers: every filtered scan still sits under its
// barrier (or holds the whole filter), with nothing of the client's pushed
// into it but DuckDB's optional join and Top-N filters, which are taken
// out; otherwise the statement fails.

#include "policy.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_policy {

// Whether DuckDB added `filter` to a scan only to skip work, so that the
// scan returns the same rows without it: a Top-N's bound (an optional
// dynamic filter), what a join's build side learnt (its min/max and Bloom
// filters), an optional IN list. Its values come from the client's side of
// the statement.
bool Optional(const TableFilter &filter) {
	switch (filter.filter_type) {
	case TableFilterType::OPTIONAL_FILTER:
	case TableFilterType::DYNAMIC_FILTER:
	case TableFilterType::BLOOM_FILTER:
		return true;
	default:
		return false;
	}
}

// Removes from `filter` what DuckDB added only to skip work (`Optional`):
// false when nothing is left of it.
bool KeepRequired(unique_ptr<TableFilter> &filter) {
	if (Optional(*filter)) {
		return false;
	}
	if (filter->filter_type == TableFilterType::CONJUNCTION_AND) {
		auto &children = filter->Cast<ConjunctionAndFilter>().child_filters;
		vector<unique_ptr<TableFilter>> kept;
		for (auto &child : children) {
			if (KeepRequired(child)) {
				kept.push_back(std::move(child));
			}
		}
		children = std::move(kept);
		return !children.empty();
	}
	return true;
}

// Takes out of a filtered scan whose policy filter runs above it (not
// whole in its table filters) everything derived from the client's side
// that DuckDB would evaluate there, before the policy, on every tenant's
// rows: the Top-N's and joins' optional filters and the set a join's build
// side pushes its bounds and Bloom filters into at run time (recorded in
// `dropped`, so the joins stop building them). What the scan then returns
// depends on the table and the policy's own table filters only, and so do
// its counts in a profile.
void DropClientFilters(LogicalGet &get, std::unordered_set<DynamicTableFilterSet *> &dropped) {
	auto &filters = get.table_filters.filters;
	for (auto entry = filters.begin(); entry != filters.end();) {
		if (KeepRequired(entry->second)) {
			++entry;
		} else {
			entry = filters.erase(entry);
		}
	}
	if (get.dynamic_filters) {
		dropped.insert(get.dynamic_filters.get());
		get.dynamic_filters = nullptr;
	}
}

// Removes the joins' pushdown of bounds into the dynamic filter sets that
// `DropClientFilters` took out of their scans.
void ForgetDropped(LogicalOperator &op, const std::unordered_set<DynamicTableFilterSet *> &dropped) {
	if (op.type == LogicalOperatorType::LOGICAL_COMPARISON_JOIN || op.type == LogicalOperatorType::LOGICAL_DELIM_JOIN) {
		auto &pushdown = op.Cast<LogicalComparisonJoin>().filter_pushdown;
		if (pushdown) {
			auto &probes = pushdown->probe_info;
			vector<JoinFilterPushdownFilter> kept;
			for (auto &probe : probes) {
				if (!dropped.count(probe.dynamic_filters.get())) {
					kept.push_back(std::move(probe));
				}
			}
			probes = std::move(kept);
		}
	}
	for (auto &child : op.children) {
		ForgetDropped(*child, dropped);
	}
}

// Whether the filters left in a filtered scan whose policy is whole in its
// table filters evaluate nothing the client wrote: a Top-N's or a join's
// dynamic bound and Bloom filter are evaluated with the policy's own, on
// the rows they pass (the scan returns only rows the policy passes, so its
// counts are of those). Anything else (a client predicate that got past
// the barrier) is refused.
bool PolicySafe(const TableFilter &filter) {
	switch (filter.filter_type) {
	case TableFilterType::DYNAMIC_FILTER:
	case TableFilterType::BLOOM_FILTER:
		return true;
	case TableFilterType::OPTIONAL_FILTER: {
		auto &child = filter.Cast<OptionalFilter>().child_filter;
		return !child || PolicySafe(*child);
	}
	default:
		return false;
	}
}

// Whether `filter` is `own` or holds it in a conjunction.
bool Holds(const TableFilter &filter, const TableFilter &own) {
	if (filter.Equals(own)) {
		return true;
	}
	if (filter.filter_type == TableFilterType::CONJUNCTION_AND) {
		for (auto &child : filter.Cast<ConjunctionAndFilter>().child_filters) {
			if (Holds(*child, own)) {
				return true;
			}
		}
	}
	return false;
}

// Whether `filter`, in a scan of a filtered table on `column`, evaluates
// nothing the client wrote: DuckDB's dynamic bounds (`PolicySafe`), a table
// filter of the policy put there (`scan`), or what DuckDB's statistics
// propagation makes of one whose comparison holds or is NULL for every row
// (`IS NOT NULL`); or a conjunction of those.
bool Accepted(const TableFilter &filter, idx_t column, const ScanPolicy *scan) {
	if (PolicySafe(filter)) {
		return true;
	}
	if (filter.filter_type == TableFilterType::CONJUNCTION_AND) {
		for (auto &child : filter.Cast<ConjunctionAndFilter>().child_filters) {
			if (!Accepted(*child, column, scan)) {
				return false;
			}
		}
		return true;
	}
	if (!scan) {
		return false;
	}
	for (auto &own : scan->filters) {
		if (own.first == column && (own.second->Equals(filter) || filter.filter_type == TableFilterType::IS_NOT_NULL)) {
			return true;
		}
	}
	return false;
}

// Whether the statistics of `get`'s table prove the policy's filter (kept
// above the scan, see `ScanPolicy::provable`) holds for every row: each of
// its conjuncts, as DuckDB's statistics propagation proves one before it
// removes the filter.
bool Proved(ClientContext &context, LogicalGet &get, const ScanPolicy &scan) {
	if (scan.provable.empty()) {
		return false;
	}
	for (auto &own : scan.provable) {
		auto stats = ColumnStatistics(context, get, own.first);
		if (!stats || own.second->CheckStatistics(*stats) != FilterPropagateResult::FILTER_ALWAYS_TRUE) {
			return false;
		}
	}
	return true;
}

// Whether every table filter of the policy put into `get` is still there,
// or DuckDB's statistics prove it holds for every row (then its statistics
// propagation removed it), or holds or is NULL (then it made it `IS NOT
// NULL`).
bool Kept(ClientContext &context, LogicalGet &get, const ScanPolicy &scan) {
	for (auto &own : scan.filters) {
		auto entry = get.table_filters.filters.find(own.first);
		if (entry != get.table_filters.filters.end() && Holds(*entry->second, *own.second)) {
			continue;
		}
		auto stats = ColumnStatistics(context, get, own.first);
		auto proved = stats ? own.second->CheckStatistics(*stats) : FilterPropagateResult::NO_PRUNING_POSSIBLE;
		if (proved == FilterPropagateResult::FILTER_ALWAYS_TRUE) {
			continue;
		}
		if (proved == FilterPropagateResult::FILTER_TRUE_OR_NULL && entry != get.table_filters.filters.end() &&
		    Holds(*entry->second, IsNotNullFilter())) {
			continue;
		}
		return false;
	}
	return true;
}

// Whether `op` reads the table under one of this plan's policy filters (or
// through a scan that holds the whole filter, which `Check` checks).
bool UnderPolicy(PolicyState &state, LogicalOperator &op, TableCatalogEntry &table) {
	if (op.type == LogicalOperatorType::LOGICAL_FILTER && state.inserted.count(&op) && op.children.size() == 1 &&
	    op.children[0]->type == LogicalOperatorType::LOGICAL_GET) {
		auto other = op.children[0]->Cast<LogicalGet>().GetTable();
		if (other && other.get() == &table) {
			return true;
		}
	}
	if (op.type == LogicalOperatorType::LOGICAL_GET) {
		auto found = state.scans.find(&op);
		auto other = op.Cast<LogicalGet>().GetTable();
		if (found != state.scans.end() && found->second.whole && other && other.get() == &table) {
			return true;
		}
	}
	for (auto &child : op.children) {
		if (UnderPolicy(state, *child, table)) {
			return true;
		}
	}
	return false;
}

// DuckDB's late materialization (a Top-N or LIMIT over a scan): the scan
// reads again the rows whose row ids the filtered side returned, as the
// left side of a semi join on the row id (no expression of the client's is
// evaluated before the join).
bool LateMaterialized(PolicyState &state, LogicalGet &get, LogicalOperator *parent, TableCatalogEntry &table) {
	if (!parent || parent->type != LogicalOperatorType::LOGICAL_COMPARISON_JOIN || parent->children.size() != 2 ||
	    parent->children[0].get() != &get) {
		return false;
	}
	auto &join = parent->Cast<LogicalComparisonJoin>();
	if (join.join_type != JoinType::SEMI || join.conditions.empty() || !get.table_filters.filters.empty()) {
		return false;
	}
	auto bindings = get.GetColumnBindings();
	auto &ids = get.GetColumnIds();
	for (auto &cond : join.conditions) {
		if (cond.comparison != ExpressionType::COMPARE_EQUAL ||
		    cond.left->GetExpressionClass() != ExpressionClass::BOUND_COLUMN_REF) {
			return false;
		}
		auto &ref = cond.left->Cast<BoundColumnRefExpression>();
		bool row_id = false;
		for (idx_t i = 0; i < bindings.size(); i++) {
			if (bindings[i] == ref.binding) {
				auto index = get.projection_ids.empty() ? i : get.projection_ids[i];
				row_id = index < ids.size() && ids[index].IsVirtualColumn();
			}
		}
		if (!row_id) {
			return false;
		}
	}
	return UnderPolicy(state, *parent->children[1], table);
}

void Check(ClientContext &context, PolicyState &state, LogicalOperator &op, LogicalOperator *parent) {
	if (op.type == LogicalOperatorType::LOGICAL_GET) {
		auto &get = op.Cast<LogicalGet>();
		auto table = get.GetTable();
		if (!table && state.IsListing(get.function.name)) {
			auto policy = state.FindFunction(get.function.name);
			if (!policy) {
				throw PermissionException("a row policy could not be applied to this statement");
			}
			// A catalog listing takes no pushed filter: it must sit under
			// its own.
			if (policy->filtered && (!parent || !state.inserted.count(parent) || !get.table_filters.filters.empty())) {
				throw PermissionException("a row policy could not be applied to this statement");
			}
		}
		if (table) {
			auto policy = state.Find(*table);
			if (!policy) {
				throw PermissionException("a row policy could not be applied to this statement");
			}
			if (policy->filtered) {
				// Under its policy filter; or anywhere, when the policy's
				// filter is whole in the scan's table filters (then the
				// scan returns only rows it passes, and DuckDB's
				// statistics propagation may have removed the filter left
				// above, TRUE, once the column lifetime analyzer took its
				// projection map).
				auto found = state.scans.find(&op);
				auto scan = found == state.scans.end() ? nullptr : &found->second;
				if (!scan || !scan->whole) {
					DropClientFilters(get, state.dropped);
				}
				bool accepted = true;
				for (auto &entry : get.table_filters.filters) {
					accepted = accepted && Accepted(*entry.second, entry.first, scan);
				}
				bool under = ((parent && state.inserted.count(parent)) || (scan && scan->whole)) && accepted &&
				             (!scan || Kept(context, get, *scan));
				// The filter above a lake's scan, removed by DuckDB's
				// statistics propagation: proved again, from the same
				// statistics.
				under = under || (scan && accepted && Proved(context, get, *scan));
				if (!under && !LateMaterialized(state, get, parent, *table)) {
					throw PermissionException("a row policy could not be applied to this statement");
				}
			}
		}
	}
	for (auto &child : op.children) {
		Check(context, state, *child, &op);
	}
}

void PostOptimize(OptimizerExtensionInput &input, unique_ptr<LogicalOperator> &plan) {
	auto state = input.context.registered_state->Get<PolicyState>(STATE_KEY);
	if (!state || !plan) {
		return;
	}
	state->dropped.clear();
	Check(input.context, *state, *plan, nullptr);
	if (!state->dropped.empty()) {
		ForgetDropped(*plan, state->dropped);
		state->dropped.clear();
	}
}

} // namespace duckgate_policy
