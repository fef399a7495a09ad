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

#include "shims.h"
#include "shim_context.hpp"
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

// Named: the shims are compiled as one translation unit.
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

// A JSON value as a DuckDB value: strings, integers, reals, booleans, lists
// of those; NULL for null; any other (an object) as its JSON text.
Value ToValue(yyjson_val *v) {
	if (!v || yyjson_is_null(v)) {
		return Value();
	}
	if (yyjson_is_str(v)) {
		return Value(string(yyjson_get_str(v), yyjson_get_len(v)));
	}
	if (yyjson_is_bool(v)) {
		return Value::BOOLEAN(yyjson_get_bool(v));
	}
	if (yyjson_is_sint(v)) {
		return Value::BIGINT(yyjson_get_sint(v));
	}
	if (yyjson_is_uint(v)) {
		return Value::UBIGINT(yyjson_get_uint(v));
	}
	if (yyjson_is_real(v)) {
		return Value::DOUBLE(yyjson_get_real(v));
	}
	if (yyjson_is_arr(v)) {
		vector<Value> items;
		size_t idx, max;
		yyjson_val *item;
		yyjson_arr_foreach(v, idx, max, item) {
			items.push_back(ToValue(item));
		}
		if (items.empty()) {
			return Value::LIST(LogicalType::VARCHAR, {});
		}
		auto type = items[0].type();
		for (auto &i : items) {
			if (i.type() != type) {
				// Mixed kinds: every item as text.
				vector<Value> texts;
				for (auto &x : items) {
					texts.push_back(x.IsNull() ? Value(LogicalType::VARCHAR) : Value(x.ToString()));
				}
				return Value::LIST(LogicalType::VARCHAR, std::move(texts));
			}
		}
		return Value::LIST(type, std::move(items));
	}
	size_t len = 0;
	char *text = yyjson_val_write(v, 0, &len);
	if (!text) {
		return Value();
	}
	string json(text, len);
	free(text);
	return Value(json);
}

// Adds `obj`'s members to `out` by their exact name, and nested objects'
// members by dotted path (`org.tenant`), as the gateway reads claims; a
// name reached twice is ambiguous.
void AddClaims(yyjson_val *obj, const string &prefix, Claims &out, idx_t depth) {
	size_t idx, max;
	yyjson_val *key, *val;
	yyjson_obj_foreach(obj, idx, max, key, val) {
		string name = prefix + string(yyjson_get_str(key), yyjson_get_len(key));
		if (!out.values.emplace(name, ToValue(val)).second) {
			out.ambiguous.insert(name);
		}
		if (yyjson_is_obj(val) && depth < 8) {
			AddClaims(val, name + ".", out, depth + 1);
		}
	}
}

string Text(yyjson_val *obj, const char *key) {
	auto v = yyjson_obj_get(obj, key);
	if (!v || !yyjson_is_str(v)) {
		throw InvalidInputException("policy: '%s' is not a string", key);
	}
	return string(yyjson_get_str(v), yyjson_get_len(v));
}

// Reads the gateway's policy document (see `engine::policy`).
shared_ptr<PolicyState> ReadSpec(const char *spec, size_t len) {
	auto doc = yyjson_read(spec, len, 0);
	if (!doc) {
		throw InvalidInputException("policy: not JSON");
	}
	auto state = make_shared_ptr<PolicyState>();
	try {
		auto root = yyjson_doc_get_root(doc);
		auto tables = yyjson_obj_get(root, "tables");
		if (!tables || !yyjson_is_arr(tables)) {
			throw InvalidInputException("policy: no tables");
		}
		auto functions = yyjson_obj_get(root, "functions");
		if (functions && !yyjson_is_arr(functions)) {
			throw InvalidInputException("policy: functions is a list");
		}
		auto listings = yyjson_obj_get(root, "listings");
		if (!listings || !yyjson_is_arr(listings)) {
			throw InvalidInputException("policy: no listings");
		}
		size_t li, lmax;
		yyjson_val *listing;
		yyjson_arr_foreach(listings, li, lmax, listing) {
			if (!yyjson_is_str(listing)) {
				throw InvalidInputException("policy: a listing is a function's name");
			}
			state->listings.emplace_back(yyjson_get_str(listing), yyjson_get_len(listing));
		}
		auto entries = yyjson_arr_size(tables) + (functions ? yyjson_arr_size(functions) : 0);
		for (size_t idx = 0; idx < entries; idx++) {
			TablePolicy p;
			auto t = idx < yyjson_arr_size(tables) ? yyjson_arr_get(tables, idx)
			                                        : yyjson_arr_get(functions, idx - yyjson_arr_size(tables));
			if (idx < yyjson_arr_size(tables)) {
				p.catalog = Text(t, "catalog");
				p.schema = Text(t, "schema");
			} else {
				p.function = true;
			}
			p.name = Text(t, "name");
			if (p.function && !state->IsListing(p.name)) {
				throw InvalidInputException("policy: %s is not a catalog listing", p.name);
			}
			auto filter = yyjson_obj_get(t, "filter");
			if (filter && yyjson_is_str(filter)) {
				p.filtered = true;
				p.filter = string(yyjson_get_str(filter), yyjson_get_len(filter));
			}
			auto masks = yyjson_obj_get(t, "masks");
			if (masks && yyjson_is_arr(masks)) {
				size_t i, n;
				yyjson_val *m;
				yyjson_arr_foreach(masks, i, n, m) {
					if (!yyjson_is_arr(m) || yyjson_arr_size(m) != 2 || !yyjson_is_str(yyjson_arr_get(m, 0)) ||
					    !yyjson_is_str(yyjson_arr_get(m, 1))) {
						throw InvalidInputException("policy: a mask is [column, expression]");
					}
					p.masks.emplace_back(yyjson_get_str(yyjson_arr_get(m, 0)),
					                     yyjson_get_str(yyjson_arr_get(m, 1)));
				}
			}
			state->tables.push_back(std::move(p));
		}
		auto claims = yyjson_obj_get(root, "claims");
		if (claims && yyjson_is_obj(claims)) {
			AddClaims(claims, "", state->claims, 0);
		}
	} catch (...) {
		yyjson_doc_free(doc);
		throw;
	}
	yyjson_doc_free(doc);
	return state;
}

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

char *CopyOut(const string &text) {
	auto out = static_cast<char *>(malloc(text.size() + 1));
	if (!out) {
		return nullptr;
	}
	memcpy(out, text.data(), text.size());
	out[text.size()] = '\0';
	return out;
}

} // namespace duckgate_policy


extern "C" {

// Registers the policy optimizer extension with the database. 0 on success.
int duckgate_policy_register(void *database) {
	try {
		auto wrapper = static_cast<DatabaseWrapper *>(database);
		if (!wrapper || !wrapper->database) {
			return -1;
		}
		OptimizerExtension extension;
		extension.pre_optimize_function = duckgate_policy::PreOptimize;
		extension.optimize_function = duckgate_policy::PostOptimize;
		OptimizerExtension::Register(DBConfig::GetConfig(*wrapper->database->instance), std::move(extension));
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
			return duckgate_policy::CopyOut("no such connection");
		}
		if (!spec) {
			context->registered_state->Remove(duckgate_policy::STATE_KEY);
			return nullptr;
		}
		// Without the optimizer (or its extensions) nothing would apply it.
		auto &config = DBConfig::GetConfig(*context);
		if (!ClientConfig::GetConfig(*context).enable_optimizer ||
		    config.options.disabled_optimizers.count(OptimizerType::EXTENSION)) {
			return duckgate_policy::CopyOut("DuckDB's optimizer extensions are disabled: row policies cannot be applied");
		}
		auto state = duckgate_policy::ReadSpec(spec, len);
		// Insert keeps an existing entry: the old policy goes first.
		context->registered_state->Remove(duckgate_policy::STATE_KEY);
		context->registered_state->Insert(duckgate_policy::STATE_KEY, std::move(state));
		return nullptr;
	} catch (std::exception &ex) {
		ErrorData error(ex);
		return duckgate_policy::CopyOut(error.RawMessage());
	} catch (...) {
		return duckgate_policy::CopyOut("the policy could not be installed");
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
		return duckgate_policy::CopyOut(error.RawMessage());
	} catch (...) {
		return duckgate_policy::CopyOut("the policy could not be bound");
	}
}

void duckgate_policy_free(char *text) {
	free(text);
}

} // extern "C"
