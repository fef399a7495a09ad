// Before DuckDB's optimizers: every scan of a table or listing the policy
// names wrapped as Projection (masks) <- Filter (the barrier) <- Get.

#include "policy.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_policy {

// `expr` evaluated so that a row it cannot be evaluated on (a cast that
// fails, a function that raises) makes it NULL instead of an error: a
// policy's filter runs on every tenant's rows, and DuckDB's error would
// quote the row's value ("Could not convert string 'acme' to UINT64"). A
// filter NULL removes the row; a mask NULL hides the value. (DuckDB's
// `TRY()`: it catches execution errors only, as this wants.)
unique_ptr<Expression> Try(unique_ptr<Expression> expr) {
	if (expr->GetExpressionClass() == ExpressionClass::BOUND_CONSTANT) {
		return expr;
	}
	auto tried = make_uniq<BoundOperatorExpression>(ExpressionType::OPERATOR_TRY, expr->return_type);
	tried->children.push_back(std::move(expr));
	return std::move(tried);
}

// Wraps the scan `op` in the policy (see the header).
unique_ptr<LogicalOperator> Wrap(OptimizerExtensionInput &input, PolicyState &state, const TablePolicy &policy,
                                 unique_ptr<LogicalOperator> op) {
	auto &get = op->Cast<LogicalGet>();
	if (!get.projection_ids.empty() || !get.table_filters.filters.empty()) {
		throw PermissionException("a row policy could not be applied to this statement");
	}
	BoundPolicy bound;
	try {
		bound = Bind(input.context, policy, state.claims);
	} catch (std::exception &) {
		// Start-up bound it without claims: the caller's claims do not fit
		// it (a list where a value is compared, say). Neither the policy's
		// text nor a place in it is the client's to see.
		throw PermissionException("the row policy of %s does not apply to this identity's claims", policy.name);
	}
	// The scan keeps its columns under a new index; the old one becomes the
	// projection's, so the plan above reads the projection.
	auto old_index = get.table_index;
	auto new_index = input.optimizer.binder.GenerateTableIndex();
	auto original = get.GetColumnIds().size();
	op->ResolveOperatorTypes();
	auto original_types = op->types;
	auto scan = PushIntoScan(input.context, bound, get, new_index);
	if (bound.filter) {
		Retarget(bound.filter, bound, get, new_index);
		bound.filter = Try(std::move(bound.filter));
	}
	for (auto &m : bound.masks) {
		Retarget(m.second, bound, get, new_index);
		m.second = Try(std::move(m.second));
	}
	if (get.GetColumnIds().empty()) {
		// A filter that reads no column (`claim('x') = 'y'`): the scan still
		// returns one, so the filter has a row to pass or drop.
		get.AddColumnId(0);
	}
	get.table_index = new_index;
	auto scanned = get.GetColumnIds().size();
	if (bound.filter) {
		state.scans[op.get()] = std::move(scan);
	}
	unique_ptr<LogicalOperator> below = std::move(op);
	below->ResolveOperatorTypes();
	if (bound.filter) {
		auto filter = make_uniq<LogicalFilter>(std::move(bound.filter));
		// The barrier: DuckDB's filter pushdown and pull-up stop at a filter
		// with a projection map.
		for (idx_t i = 0; i < scanned; i++) {
			filter->projection_map.push_back(i);
		}
		filter->children.push_back(std::move(below));
		state.inserted.insert(filter.get());
		below = std::move(filter);
		below->ResolveOperatorTypes();
	}
	vector<unique_ptr<Expression>> select;
	auto &ids = below->type == LogicalOperatorType::LOGICAL_GET ? below->Cast<LogicalGet>().GetColumnIds()
	                                                             : below->children[0]->Cast<LogicalGet>().GetColumnIds();
	idx_t outputs = MaxValue<idx_t>(original, 1);
	for (idx_t i = 0; i < outputs; i++) {
		unique_ptr<Expression> e;
		if (i < original && !ids[i].IsVirtualColumn()) {
			for (auto &m : bound.masks) {
				if (m.first == ids[i].GetPrimaryIndex() && m.second) {
					e = m.second->Copy();
				}
			}
		}
		if (!e) {
			auto type = i < original ? original_types[i] : below->types[i];
			e = make_uniq<BoundColumnRefExpression>(type, ColumnBinding(new_index, i));
		}
		select.push_back(std::move(e));
	}
	auto projection = make_uniq<LogicalProjection>(old_index, std::move(select));
	projection->children.push_back(std::move(below));
	projection->ResolveOperatorTypes();
	return std::move(projection);
}

void Apply(OptimizerExtensionInput &input, PolicyState &state, unique_ptr<LogicalOperator> &op) {
	for (auto &child : op->children) {
		Apply(input, state, child);
	}
	if (op->type != LogicalOperatorType::LOGICAL_GET) {
		return;
	}
	auto &get = op->Cast<LogicalGet>();
	auto table = get.GetTable();
	const TablePolicy *policy;
	if (table) {
		policy = state.Find(*table);
	} else if (state.IsListing(get.function.name)) {
		policy = state.FindFunction(get.function.name);
	} else {
		// A table function that reads no catalog table: the grants decide.
		return;
	}
	if (!policy) {
		throw PermissionException("a row policy could not be applied to this statement");
	}
	if (policy->filtered && table) {
		// A row id (or a lake's file row number) counts the rows before
		// it, the filtered ones too. Before DuckDB's optimizers, every
		// column a scan reads is one the client's statement reads (a
		// count's empty column excepted).
		for (auto &id : get.GetColumnIds()) {
			if (id.IsVirtualColumn() && !id.IsEmptyColumn()) {
				throw PermissionException("the row ids of %s are not readable: they count rows of it this "
				                          "identity may not read",
				                          table->name);
			}
		}
	}
	if (policy->Applies()) {
		op = Wrap(input, state, *policy, std::move(op));
	}
}

void PreOptimize(OptimizerExtensionInput &input, unique_ptr<LogicalOperator> &plan) {
	auto state = input.context.registered_state->Get<PolicyState>(STATE_KEY);
	if (!state || !plan) {
		return;
	}
	state->inserted.clear();
	state->scans.clear();
	Apply(input, *state, plan);
}


} // namespace duckgate_policy
