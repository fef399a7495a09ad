// The policy's own comparisons of a column with a constant, put into a DuckDB
// table's scan as table filters (so row groups are skipped by min/max), and
// the ones a lake's scan can prove from its statistics.

#include "policy.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_policy {

// The column types DuckDB itself compares in a scan
// (`TypeSupportsConstantFilter` of its filter combiner).
bool ComparedInScan(const LogicalType &type) {
	auto physical = type.InternalType();
	return TypeIsNumeric(physical) || physical == PhysicalType::VARCHAR || physical == PhysicalType::BOOL;
}

// Whether `expr` is one of the table's columns as the policy's scan reads
// it (`column`: its index in the table), of the table's own type.
bool PolicyColumn(const Expression &expr, const BoundPolicy &bound, LogicalGet &get, idx_t &column) {
	if (expr.GetExpressionClass() != ExpressionClass::BOUND_COLUMN_REF) {
		return false;
	}
	auto &ref = expr.Cast<BoundColumnRefExpression>();
	if (ref.binding.table_index != bound.scan_index || ref.binding.column_index >= bound.scan_columns.size()) {
		return false;
	}
	auto &id = bound.scan_columns[ref.binding.column_index];
	if (id.IsVirtualColumn() || id.HasChildren() || id.GetPrimaryIndex() >= get.returned_types.size()) {
		return false;
	}
	column = id.GetPrimaryIndex();
	return ref.return_type == get.returned_types[column] && ComparedInScan(ref.return_type);
}

// The table filter `conjunct` (of the policy's filter) is, on `column`, or
// NULL when it is none (see above).
unique_ptr<TableFilter> ScanFilter(ClientContext &context, const Expression &conjunct, const BoundPolicy &bound,
                                   LogicalGet &get, idx_t &column) {
	if (conjunct.GetExpressionClass() == ExpressionClass::BOUND_OPERATOR) {
		auto &op = conjunct.Cast<BoundOperatorExpression>();
		if (op.children.size() != 1 || !PolicyColumn(*op.children[0], bound, get, column)) {
			return nullptr;
		}
		if (op.type == ExpressionType::OPERATOR_IS_NULL) {
			return make_uniq<IsNullFilter>();
		}
		if (op.type == ExpressionType::OPERATOR_IS_NOT_NULL) {
			return make_uniq<IsNotNullFilter>();
		}
		return nullptr;
	}
	if (conjunct.GetExpressionClass() != ExpressionClass::BOUND_COMPARISON) {
		return nullptr;
	}
	auto &comparison = conjunct.Cast<BoundComparisonExpression>();
	auto type = comparison.type;
	switch (type) {
	case ExpressionType::COMPARE_EQUAL:
	case ExpressionType::COMPARE_NOTEQUAL:
	case ExpressionType::COMPARE_LESSTHAN:
	case ExpressionType::COMPARE_LESSTHANOREQUALTO:
	case ExpressionType::COMPARE_GREATERTHAN:
	case ExpressionType::COMPARE_GREATERTHANOREQUALTO:
		break;
	default:
		return nullptr;
	}
	const Expression *constant = comparison.right.get();
	if (!PolicyColumn(*comparison.left, bound, get, column)) {
		if (!PolicyColumn(*comparison.right, bound, get, column)) {
			return nullptr;
		}
		constant = comparison.left.get();
		type = FlipComparisonExpression(type);
	}
	// A constant, or a cast of one (DuckDB's binder casts a literal to the
	// column's type; its constant folding has not run yet).
	if (!constant->IsFoldable()) {
		return nullptr;
	}
	Value value;
	if (constant->GetExpressionClass() == ExpressionClass::BOUND_CONSTANT) {
		value = constant->Cast<BoundConstantExpression>().value;
	} else if (!ExpressionExecutor::TryEvaluateScalar(context, *constant, value)) {
		// It raises: left to the barrier, where it raises as it always did.
		return nullptr;
	}
	if (value.IsNull() || value.type() != get.returned_types[column]) {
		return nullptr;
	}
	return make_uniq<ConstantFilter>(type, std::move(value));
}

// The statistics of the table's `column` as DuckDB's statistics propagation
// reads them for `get` (none while the transaction holds changes of its own
// to the table).
unique_ptr<BaseStatistics> ColumnStatistics(ClientContext &context, LogicalGet &get, idx_t column) {
	if (get.function.statistics_extended) {
		TableFunctionGetStatisticsInput input(get.bind_data.get(), ColumnIndex(column));
		return get.function.statistics_extended(context, input);
	}
	if (get.function.statistics) {
		return get.function.statistics(context, get.bind_data.get(), column);
	}
	return nullptr;
}

// `bound`'s filter as table filters of `get`, one per conjunct, or none
// when a conjunct is not one (see `ScanFilter`). Nothing is moved.
vector<std::pair<idx_t, unique_ptr<TableFilter>>> Provable(ClientContext &context, BoundPolicy &bound,
                                                           LogicalGet &get) {
	vector<std::pair<idx_t, unique_ptr<TableFilter>>> out;
	vector<unique_ptr<Expression>> conjuncts;
	conjuncts.push_back(bound.filter->Copy());
	LogicalFilter::SplitPredicates(conjuncts);
	for (auto &conjunct : conjuncts) {
		idx_t column = 0;
		auto filter = ScanFilter(context, *conjunct, bound, get, column);
		if (!filter) {
			return {};
		}
		out.emplace_back(column, std::move(filter));
	}
	return out;
}

// Moves the conjuncts of `bound`'s filter that are table filters (see
// `ScanFilter`) into `get` (numbered `index`), and answers what it put there.
// A conjunct that the table's statistics prove true for every row is
// dropped, as DuckDB's statistics propagation would drop it, and its column
// is not read for it. What stays in the filter is TRUE when nothing does.
ScanPolicy PushIntoScan(ClientContext &context, BoundPolicy &bound, LogicalGet &get, idx_t index) {
	ScanPolicy scan;
	auto table = get.GetTable();
	if (!bound.filter) {
		return scan;
	}
	if (!table || !table->IsDuckTable() || !get.function.filter_pushdown) {
		scan.provable = Provable(context, bound, get);
		return scan;
	}
	vector<unique_ptr<Expression>> conjuncts;
	conjuncts.push_back(std::move(bound.filter));
	LogicalFilter::SplitPredicates(conjuncts);
	vector<unique_ptr<Expression>> rest;
	for (auto &conjunct : conjuncts) {
		idx_t column = 0;
		auto filter = ScanFilter(context, *conjunct, bound, get, column);
		if (!filter) {
			rest.push_back(std::move(conjunct));
			continue;
		}
		auto stats = ColumnStatistics(context, get, column);
		if (stats && filter->CheckStatistics(*stats) == FilterPropagateResult::FILTER_ALWAYS_TRUE) {
			continue;
		}
		// The scan must read the column (the filter is keyed by the
		// table's column, found among the scan's).
		Retarget(conjunct, bound, get, index);
		get.table_filters.PushFilter(ColumnIndex(column), filter->Copy());
		scan.filters.emplace_back(column, std::move(filter));
	}
	scan.whole = rest.empty();
	if (rest.empty()) {
		bound.filter = make_uniq<BoundConstantExpression>(Value::BOOLEAN(true));
	} else if (rest.size() == 1) {
		bound.filter = std::move(rest[0]);
	} else {
		auto all = make_uniq<BoundConjunctionExpression>(ExpressionType::CONJUNCTION_AND);
		all->children = std::move(rest);
		bound.filter = std::move(all);
	}
	return scan;
}


} // namespace duckgate_policy
