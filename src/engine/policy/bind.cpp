// A table's policy bound against the table: `claim()` calls replaced by the
// caller's values, the filter and masks bound as `SELECT <filter>, <masks> FROM
// <table>`, and their column references moved onto the scan they wrap.

#include "policy.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_policy {

// Replaces every `claim('name')` in `expr` by the claim's value (NULL when
// the caller has none of that exact name).
void BindClaims(unique_ptr<ParsedExpression> &expr, const Claims &claims) {
	if (expr->GetExpressionClass() == ExpressionClass::FUNCTION) {
		auto &f = expr->Cast<FunctionExpression>();
		if (StringUtil::CIEquals(f.function_name, "claim") && f.schema.empty() && f.catalog.empty()) {
			if (f.children.size() != 1 || f.children[0]->GetExpressionClass() != ExpressionClass::CONSTANT ||
			    f.children[0]->Cast<ConstantExpression>().value.type().id() != LogicalTypeId::VARCHAR) {
				throw InvalidInputException("claim() takes one name, a string constant");
			}
			auto name = f.children[0]->Cast<ConstantExpression>().value.GetValue<string>();
			if (claims.ambiguous.count(name)) {
				throw InvalidInputException("claim '%s' names two values", name);
			}
			auto found = claims.values.find(name);
			auto value = found == claims.values.end() ? Value(LogicalType::VARCHAR) : found->second;
			expr = make_uniq<ConstantExpression>(std::move(value));
			return;
		}
	}
	ParsedExpressionIterator::EnumerateChildren(
	    *expr, [&](unique_ptr<ParsedExpression> &child) { BindClaims(child, claims); });
}

string Qualified(const string &catalog, const string &schema, const string &name) {
	return KeywordHelper::WriteOptionallyQuoted(catalog) + "." + KeywordHelper::WriteOptionallyQuoted(schema) + "." +
	       KeywordHelper::WriteOptionallyQuoted(name);
}

// Binds `policy` on `context` (in its current transaction) as `SELECT
// <filter>, <masks> FROM <table>` (or `FROM <function>()`).
BoundPolicy Bind(ClientContext &context, const TablePolicy &policy, const Claims &claims) {
	string sql = "SELECT ";
	sql += policy.filtered ? "(" + policy.filter + "\n)" : "TRUE";
	for (auto &m : policy.masks) {
		sql += ", (" + m.second + "\n)";
	}
	sql += " FROM " + (policy.function ? KeywordHelper::WriteOptionallyQuoted(policy.name) + "()"
	                                   : Qualified(policy.catalog, policy.schema, policy.name));
	Parser parser(context.GetParserOptions());
	parser.ParseQuery(sql);
	if (parser.statements.size() != 1 || parser.statements[0]->type != StatementType::SELECT_STATEMENT) {
		throw BinderException("policy of %s: a filter or mask is one expression", policy.name);
	}
	auto &select = parser.statements[0]->Cast<SelectStatement>();
	if (select.node->type != QueryNodeType::SELECT_NODE) {
		throw BinderException("policy of %s: a filter or mask is one expression", policy.name);
	}
	auto &node = select.node->Cast<SelectNode>();
	if (node.select_list.size() != policy.masks.size() + 1) {
		throw BinderException("policy of %s: a filter or mask is one expression", policy.name);
	}
	for (auto &e : node.select_list) {
		BindClaims(e, claims);
	}
	Planner planner(context);
	planner.CreatePlan(std::move(parser.statements[0]));
	auto &plan = planner.plan;
	if (!plan || plan->type != LogicalOperatorType::LOGICAL_PROJECTION || plan->children.size() != 1 ||
	    plan->children[0]->type != LogicalOperatorType::LOGICAL_GET || !plan->children[0]->children.empty()) {
		throw BinderException("policy of %s: a filter or mask reads only its table's row (no subqueries, "
		                      "aggregates or windows)",
		                      policy.name);
	}
	auto &get = plan->children[0]->Cast<LogicalGet>();
	BoundPolicy bound;
	bound.scan_index = get.table_index;
	bound.scan_columns = get.GetColumnIds();
	auto &exprs = plan->expressions;
	for (auto &e : exprs) {
		bool plain = true;
		ExpressionIterator::EnumerateExpression(e, [&](Expression &child) {
			auto cls = child.GetExpressionClass();
			if (cls == ExpressionClass::BOUND_SUBQUERY || cls == ExpressionClass::BOUND_PARAMETER ||
			    cls == ExpressionClass::BOUND_AGGREGATE || cls == ExpressionClass::BOUND_WINDOW) {
				plain = false;
			}
			if (cls == ExpressionClass::BOUND_COLUMN_REF &&
			    child.Cast<BoundColumnRefExpression>().binding.table_index != get.table_index) {
				plain = false;
			}
		});
		if (!plain) {
			throw BinderException("policy of %s: a filter or mask reads only its table's row", policy.name);
		}
	}
	if (policy.filtered) {
		bound.filter = std::move(exprs[0]);
		if (bound.filter->return_type != LogicalType::BOOLEAN) {
			bound.filter = BoundCastExpression::AddCastToType(context, std::move(bound.filter), LogicalType::BOOLEAN);
		}
	}
	// A mask is of a column of the scan (of the table's, or the function's
	// result), cast to its type.
	for (idx_t i = 0; i < policy.masks.size(); i++) {
		auto &column = policy.masks[i].first;
		idx_t index = get.names.size();
		for (idx_t j = 0; j < get.names.size(); j++) {
			if (StringUtil::CIEquals(get.names[j], column)) {
				index = j;
				break;
			}
		}
		if (index == get.names.size() || index >= get.returned_types.size()) {
			throw BinderException("policy of %s: no column \"%s\" to mask", policy.name, column);
		}
		auto mask = BoundCastExpression::AddCastToType(context, std::move(exprs[i + 1]), get.returned_types[index]);
		bound.masks.emplace_back(index, std::move(mask));
	}
	return bound;
}

// Points `expr`'s references to the policy's own scan at `get`'s columns
// (adding the columns `get` does not read yet), as `get` will be numbered
// (`index`).
void Retarget(unique_ptr<Expression> &expr, const BoundPolicy &bound, LogicalGet &get, idx_t index) {
	ExpressionIterator::EnumerateExpression(expr, [&](Expression &child) {
		if (child.GetExpressionClass() != ExpressionClass::BOUND_COLUMN_REF) {
			return;
		}
		auto &ref = child.Cast<BoundColumnRefExpression>();
		if (ref.binding.table_index != bound.scan_index) {
			return;
		}
		auto &wanted = bound.scan_columns[ref.binding.column_index];
		auto &ids = get.GetMutableColumnIds();
		idx_t position = ids.size();
		for (idx_t i = 0; i < ids.size(); i++) {
			if (!ids[i].IsVirtualColumn() && ids[i].GetPrimaryIndex() == wanted.GetPrimaryIndex() &&
			    !ids[i].HasChildren()) {
				position = i;
				break;
			}
		}
		if (position == ids.size()) {
			get.AddColumnId(wanted.GetPrimaryIndex());
		}
		ref.binding = ColumnBinding(index, position);
	});
}

// The policy's own comparisons in the scan. A conjunct of the policy's
// filter that is exactly `column <cmp> constant` (=, <>, <, <=, >, >=),
// `column IS NULL` or `column IS NOT NULL`, the column as the table has it
// (no cast or function on it) and the constant (claim values are
// constants) of exactly the column's type, becomes a DuckDB table filter of
// the scan (`ConstantFilter`, `IsNullFilter`, `IsNotNullFilter`) instead of
// a predicate of the barrier: the scan evaluates it on compressed segments
// and skips the row groups whose min/max rule it out, and DuckDB's
// statistics make one that holds for every row cost nothing. These table
// filters are exact: DuckDB's own filter pushdown removes a predicate it
// pushed as one from its filter (`FilterCombiner::TryPushdownConstantFilter`
// answers PUSHED_DOWN_FULLY), so every WHERE clause relies on that. Only
// operator SQL and the caller's claims are evaluated in the scan, and the
// row groups skipped are those the operator's filter removes; the barrier
// stays above for what the client writes. Only on DuckDB's own tables
// (another scan, DuckLake's or a file's, may apply a table filter to some
// types or row groups only).


} // namespace duckgate_policy
