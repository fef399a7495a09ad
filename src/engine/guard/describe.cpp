// DuckDB's own reading of a client's SQL, for the statement guard.
//
// The guard must decide from the same parse DuckDB will execute, never from a
// second tokenizer (one disagreed with DuckDB's lexer about a no-break space
// after a comment and hid whole function calls). DuckDB's C API offers no
// parse tree, so this shim asks DuckDB's C++ parser directly and writes, for
// each statement, its type and every part that holds expressions or table
// references, serialized by DuckDB's own JSON serializer (the one behind
// `json_serialize_sql`).
//
// The parse uses the connection's parser options but not its pragma handler:
// parsing here has no side effects (ClientContext::ParseStatements would run
// PRAGMA and IMPORT handling, which read files).

#include "../shims.h"
#include "duckdb.hpp"
#include "duckdb/main/client_context.hpp"
#include "duckdb/main/connection.hpp"
#include "duckdb/parser/parser.hpp"
#include "duckdb/parser/statement/list.hpp"
#include "duckdb/parser/parsed_data/create_info.hpp"
#include "duckdb/parser/parsed_data/drop_info.hpp"
#include "duckdb/parser/parsed_data/alter_info.hpp"
#include "duckdb/parser/parsed_data/load_info.hpp"
#include "duckdb/parser/expression/function_expression.hpp"
#include "duckdb/parser/parsed_data/pragma_info.hpp"
#include "duckdb/parser/parsed_data/create_table_info.hpp"
#include "duckdb/parser/parsed_data/create_view_info.hpp"
#include "duckdb/catalog/catalog_entry/view_catalog_entry.hpp"
#include "duckdb/catalog/catalog_entry_retriever.hpp"
#include "duckdb/parser/parsed_data/create_type_info.hpp"
#include "duckdb/parser/parsed_data/create_sequence_info.hpp"
#include "duckdb/parser/parsed_data/create_index_info.hpp"
#include "duckdb/parser/parsed_data/create_schema_info.hpp"
#include "duckdb/parser/parsed_data/alter_table_info.hpp"
#include "duckdb/parser/query_node/select_node.hpp"
#include "duckdb/parser/tableref/showref.hpp"
#include "duckdb/common/enums/catalog_type.hpp"
#include "duckdb/common/enums/statement_type.hpp"
#include "duckdb/planner/planner.hpp"
#include "duckdb/planner/logical_operator_visitor.hpp"
#include "duckdb/planner/operator/logical_get.hpp"
#include "duckdb/planner/operator/logical_insert.hpp"
#include "duckdb/planner/operator/logical_delete.hpp"
#include "duckdb/planner/operator/logical_update.hpp"
#include "duckdb/planner/operator/logical_merge_into.hpp"
#include "duckdb/planner/operator/logical_create_table.hpp"
#include "duckdb/planner/operator/logical_create.hpp"
#include "duckdb/catalog/catalog_entry/table_catalog_entry.hpp"
#include "duckdb/catalog/catalog_entry/schema_catalog_entry.hpp"
#include "duckdb/planner/expression/list.hpp"
#include "duckdb/common/error_data.hpp"
#include "json_serializer.hpp"

#include <cstdlib>
#include <cstring>

using namespace duckdb;
using namespace duckdb_yyjson;

namespace {

// Adds `value`, serialized by DuckDB, to the array `parts`; a part that DuckDB
// cannot serialize marks the statement unreadable (the guard then refuses).
template <class T>
void AddPart(yyjson_mut_doc *doc, yyjson_mut_val *parts, yyjson_mut_val *stmt, T &value) {
	try {
		auto v = JsonSerializer::Serialize(value, doc, true, true, true);
		yyjson_mut_arr_append(parts, v);
	} catch (std::exception &ex) {
		yyjson_mut_obj_add_bool(doc, stmt, "unreadable", true);
	}
}

template <class T>
void AddParts(yyjson_mut_doc *doc, yyjson_mut_val *parts, yyjson_mut_val *stmt, vector<unique_ptr<T>> &values) {
	for (auto &v : values) {
		if (v) {
			AddPart(doc, parts, stmt, *v);
		}
	}
}

void AddCteMap(yyjson_mut_doc *doc, yyjson_mut_val *parts, yyjson_mut_val *stmt, CommonTableExpressionMap &map) {
	if (!map.map.empty()) {
		AddPart(doc, parts, stmt, map);
	}
}

void AddSetInfo(yyjson_mut_doc *doc, yyjson_mut_val *parts, yyjson_mut_val *stmt, UpdateSetInfo *info) {
	if (!info) {
		return;
	}
	if (info->condition) {
		AddPart(doc, parts, stmt, *info->condition);
	}
	AddParts(doc, parts, stmt, info->expressions);
}

void AddTarget(yyjson_mut_doc *doc, yyjson_mut_val *stmt, const string &catalog, const string &schema,
               const string &name) {
	auto target = yyjson_mut_obj(doc);
	yyjson_mut_obj_add_strcpy(doc, target, "catalog", catalog.c_str());
	yyjson_mut_obj_add_strcpy(doc, target, "schema", schema.c_str());
	yyjson_mut_obj_add_strcpy(doc, target, "name", name.c_str());
	yyjson_mut_obj_add_val(doc, stmt, "target", target);
}

// The name a CREATE gives its object ("" for kinds the guard refuses anyway).
string CreatedName(CreateInfo &info) {
	switch (info.type) {
	case CatalogType::TABLE_ENTRY:
		return info.Cast<CreateTableInfo>().table;
	case CatalogType::VIEW_ENTRY:
		return info.Cast<CreateViewInfo>().view_name;
	case CatalogType::TYPE_ENTRY:
		return info.Cast<CreateTypeInfo>().name;
	case CatalogType::SEQUENCE_ENTRY:
		return info.Cast<CreateSequenceInfo>().name;
	case CatalogType::INDEX_ENTRY:
		return info.Cast<CreateIndexInfo>().index_name;
	case CatalogType::SCHEMA_ENTRY:
		return info.schema;
	default:
		return "";
	}
}

yyjson_mut_val *Describe(yyjson_mut_doc *doc, SQLStatement &statement) {
	auto stmt = yyjson_mut_obj(doc);
	yyjson_mut_obj_add_strcpy(doc, stmt, "type", StatementTypeToString(statement.type).c_str());
	auto parts = yyjson_mut_arr(doc);
	switch (statement.type) {
	case StatementType::SELECT_STATEMENT: {
		auto &s = statement.Cast<SelectStatement>();
		AddPart(doc, parts, stmt, s);
		break;
	}
	case StatementType::EXPLAIN_STATEMENT: {
		auto &s = statement.Cast<ExplainStatement>();
		yyjson_mut_obj_add_bool(doc, stmt, "analyze", s.explain_type == ExplainType::EXPLAIN_ANALYZE);
		if (s.stmt) {
			yyjson_mut_obj_add_val(doc, stmt, "inner", Describe(doc, *s.stmt));
			// DuckDB's own rendering of the explained statement, so the guard
			// can have its plan checked like any query.
			try {
				yyjson_mut_obj_add_strcpy(doc, stmt, "inner_sql", s.stmt->ToString().c_str());
			} catch (std::exception &ex) {
				yyjson_mut_obj_add_bool(doc, stmt, "unreadable", true);
			}
		}
		break;
	}
	case StatementType::INSERT_STATEMENT: {
		auto &s = statement.Cast<InsertStatement>();
		AddTarget(doc, stmt, s.catalog, s.schema, s.table);
		AddCteMap(doc, parts, stmt, s.cte_map);
		if (s.select_statement) {
			AddPart(doc, parts, stmt, *s.select_statement);
		}
		if (s.table_ref) {
			AddPart(doc, parts, stmt, *s.table_ref);
		}
		AddParts(doc, parts, stmt, s.returning_list);
		if (s.on_conflict_info) {
			if (s.on_conflict_info->condition) {
				AddPart(doc, parts, stmt, *s.on_conflict_info->condition);
			}
			AddSetInfo(doc, parts, stmt, s.on_conflict_info->set_info.get());
		}
		break;
	}
	case StatementType::UPDATE_STATEMENT: {
		auto &s = statement.Cast<UpdateStatement>();
		AddCteMap(doc, parts, stmt, s.cte_map);
		if (s.table) {
			AddPart(doc, parts, stmt, *s.table);
		}
		if (s.from_table) {
			AddPart(doc, parts, stmt, *s.from_table);
		}
		AddSetInfo(doc, parts, stmt, s.set_info.get());
		AddParts(doc, parts, stmt, s.returning_list);
		break;
	}
	case StatementType::DELETE_STATEMENT: {
		auto &s = statement.Cast<DeleteStatement>();
		AddCteMap(doc, parts, stmt, s.cte_map);
		if (s.table) {
			AddPart(doc, parts, stmt, *s.table);
		}
		if (s.condition) {
			AddPart(doc, parts, stmt, *s.condition);
		}
		AddParts(doc, parts, stmt, s.using_clauses);
		AddParts(doc, parts, stmt, s.returning_list);
		break;
	}
	case StatementType::CREATE_STATEMENT: {
		auto &s = statement.Cast<CreateStatement>();
		auto &info = *s.info;
		yyjson_mut_obj_add_strcpy(doc, stmt, "object", CatalogTypeToString(info.type).c_str());
		yyjson_mut_obj_add_bool(doc, stmt, "temporary", info.temporary);
		yyjson_mut_obj_add_bool(doc, stmt, "replace", info.on_conflict == OnCreateConflict::REPLACE_ON_CONFLICT);
		AddTarget(doc, stmt, info.catalog, info.schema, CreatedName(info));
		if (info.type == CatalogType::INDEX_ENTRY) {
			// An index lives in its table's schema: the table decides whose
			// object the statement changes.
			yyjson_mut_obj_add_strcpy(doc, stmt, "on_table", info.Cast<CreateIndexInfo>().table.c_str());
		}
		AddPart(doc, parts, stmt, info);
		if (info.type == CatalogType::VIEW_ENTRY) {
			// A view's query is bound only when the view is used; the guard
			// binds it at creation too, so a view over what clients may not
			// read is never created.
			auto &view = info.Cast<CreateViewInfo>();
			if (view.query) {
				try {
					yyjson_mut_obj_add_strcpy(doc, stmt, "inner_sql", view.query->ToString().c_str());
				} catch (std::exception &ex) {
					yyjson_mut_obj_add_bool(doc, stmt, "unreadable", true);
				}
			}
		}
		if (info.type == CatalogType::TYPE_ENTRY) {
			// DuckDB's serializer leaves out the query of `CREATE TYPE ... AS
			// ENUM (query)`: the guard must see it like any other query.
			auto &type_info = info.Cast<CreateTypeInfo>();
			if (type_info.query) {
				if (type_info.query->type == StatementType::SELECT_STATEMENT) {
					AddPart(doc, parts, stmt, type_info.query->Cast<SelectStatement>());
				} else {
					yyjson_mut_obj_add_bool(doc, stmt, "unreadable", true);
				}
			}
		}
		break;
	}
	case StatementType::DROP_STATEMENT: {
		auto &s = statement.Cast<DropStatement>();
		auto &info = *s.info;
		yyjson_mut_obj_add_strcpy(doc, stmt, "object", CatalogTypeToString(info.type).c_str());
		AddTarget(doc, stmt, info.catalog, info.schema, info.name);
		break;
	}
	case StatementType::ALTER_STATEMENT: {
		auto &s = statement.Cast<AlterStatement>();
		auto &info = *s.info;
		yyjson_mut_obj_add_strcpy(doc, stmt, "object", CatalogTypeToString(info.GetCatalogType()).c_str());
		AddTarget(doc, stmt, info.catalog, info.schema, info.name);
		// A rename gives the object a new name, which must not shadow the
		// system's either.
		if (info.type == AlterType::ALTER_TABLE) {
			auto &table = info.Cast<AlterTableInfo>();
			if (table.alter_table_type == AlterTableType::RENAME_TABLE) {
				yyjson_mut_obj_add_strcpy(doc, stmt, "new_name", table.Cast<RenameTableInfo>().new_table_name.c_str());
			}
		} else if (info.type == AlterType::ALTER_VIEW) {
			auto &view = info.Cast<AlterViewInfo>();
			if (view.alter_view_type == AlterViewType::RENAME_VIEW) {
				yyjson_mut_obj_add_strcpy(doc, stmt, "new_name", view.Cast<RenameViewInfo>().new_view_name.c_str());
			}
		}
		AddPart(doc, parts, stmt, info);
		break;
	}
	case StatementType::SET_STATEMENT: {
		// Only to name the refusal: SET, RESET or USE.
		auto &s = statement.Cast<SetStatement>();
		const char *verb = s.set_type == SetType::RESET  ? "RESET"
		                   : s.scope == SetScope::VARIABLE ? "SET VARIABLE"
		                   : s.name == "schema"            ? "USE"
		                                                   : "SET";
		yyjson_mut_obj_add_str(doc, stmt, "verb", verb);
		break;
	}
	case StatementType::CALL_STATEMENT: {
		// CHECKPOINT is a CALL of checkpoint(): name it so.
		auto &s = statement.Cast<CallStatement>();
		const char *verb = "CALL";
		if (s.function && s.function->GetExpressionClass() == ExpressionClass::FUNCTION) {
			auto &name = s.function->Cast<FunctionExpression>().function_name;
			if (name == "checkpoint" || name == "force_checkpoint") {
				verb = "CHECKPOINT";
			}
		}
		yyjson_mut_obj_add_str(doc, stmt, "verb", verb);
		break;
	}
	case StatementType::LOAD_STATEMENT: {
		auto &s = statement.Cast<LoadStatement>();
		yyjson_mut_obj_add_str(doc, stmt, "verb", s.info->load_type == LoadType::LOAD ? "LOAD" : "INSTALL");
		break;
	}
	case StatementType::PRAGMA_STATEMENT: {
		auto &s = statement.Cast<PragmaStatement>();
		auto &name = s.info->name;
		const char *verb = name == "import_database" ? "IMPORT DATABASE"
		                   : name == "copy_database" ? "COPY DATABASE"
		                   : (name == "checkpoint" || name == "force_checkpoint") ? "CHECKPOINT"
		                                                                           : "PRAGMA";
		yyjson_mut_obj_add_str(doc, stmt, "verb", verb);
		break;
	}
	default:
		// Every other kind is judged by its type alone.
		break;
	}
	yyjson_mut_obj_add_val(doc, stmt, "parts", parts);
	return stmt;
}

char *CopyOut(const char *data, size_t len) {
	auto out = static_cast<char *>(malloc(len + 1));
	if (!out) {
		return nullptr;
	}
	memcpy(out, data, len);
	out[len] = '\0';
	return out;
}

// Every function a bound plan calls and every table function it scans, with
// views and macros expanded (the binder did that). Each expression is seen
// once: DuckDB's visitor walks an expression's children itself after
// `VisitReplace` answers nullptr, so these record the node and leave the
// children to it (walking them here too made the walk exponential in the
// nesting: a 30-term sum visited 2^30 nodes).
// A catalog object a plan reads or changes, by its bound (resolved) name.
struct PlanObject {
	string catalog;
	string schema;
	string name;
	// What the plan does with it: `read`, `insert`, `update`, `delete`,
	// `merge`, `create table`, `create view`, `view` (a view the binder
	// expanded: its plan holds what the view reads), or `ddl` (any other
	// CREATE, DROP or ALTER, whose object the plan does not resolve).
	string action;
	// For `read`: the columns the scan returns (rowid and other virtual
	// columns left out).
	vector<string> columns;
};

// A table function a plan scans that reads no catalog table, with the
// paths it was bound to (its first argument: a string or a list of them),
// as a named source's view or the client's text gave them.
struct SourceRead {
	string function;
	vector<string> paths;
};

class PlanNames : public LogicalOperatorVisitor {
public:
	vector<string> functions;
	vector<string> tables;
	vector<PlanObject> objects;
	// Table functions scanned that read no catalog table (readers,
	// generators, DuckDB's catalog functions).
	vector<string> sources;
	vector<SourceRead> reads;
	bool unreadable = false;

	void VisitOperator(LogicalOperator &op) override {
		switch (op.type) {
		case LogicalOperatorType::LOGICAL_GET: {
			auto &get = op.Cast<LogicalGet>();
			tables.push_back(get.function.name);
			auto table = get.GetTable();
			if (!table) {
				sources.push_back(get.function.name);
				SourceRead read {get.function.name, {}};
				if (!get.parameters.empty() && !get.parameters[0].IsNull()) {
					auto &first = get.parameters[0];
					if (first.type().id() == LogicalTypeId::VARCHAR) {
						read.paths.push_back(StringValue::Get(first));
					} else if (first.type().id() == LogicalTypeId::LIST) {
						for (auto &item : ListValue::GetChildren(first)) {
							if (!item.IsNull() && item.type().id() == LogicalTypeId::VARCHAR) {
								read.paths.push_back(StringValue::Get(item));
							}
						}
					}
				}
				reads.push_back(std::move(read));
			} else {
				PlanObject object = Of(*table, "read");
				for (auto &column : get.GetColumnIds()) {
					if (column.IsVirtualColumn() || column.IsRowIdColumn() || column.IsEmptyColumn()) {
						continue;
					}
					auto index = column.GetPrimaryIndex();
					if (index < get.names.size()) {
						object.columns.push_back(get.names[index]);
					}
				}
				objects.push_back(std::move(object));
			}
			break;
		}
		case LogicalOperatorType::LOGICAL_INSERT:
			objects.push_back(Of(op.Cast<LogicalInsert>().table, "insert"));
			break;
		case LogicalOperatorType::LOGICAL_DELETE:
			objects.push_back(Of(op.Cast<LogicalDelete>().table, "delete"));
			break;
		case LogicalOperatorType::LOGICAL_UPDATE:
			objects.push_back(Of(op.Cast<LogicalUpdate>().table, "update"));
			break;
		case LogicalOperatorType::LOGICAL_MERGE_INTO:
			objects.push_back(Of(op.Cast<LogicalMergeInto>().table, "merge"));
			break;
		case LogicalOperatorType::LOGICAL_CREATE_TABLE: {
			auto &create = op.Cast<LogicalCreateTable>();
			objects.push_back({create.schema.ParentCatalog().GetName(), create.schema.name,
			                   create.info->Base().table, "create table", {}});
			break;
		}
		case LogicalOperatorType::LOGICAL_CREATE_VIEW: {
			auto &create = op.Cast<LogicalCreate>();
			auto &info = create.info->Cast<CreateViewInfo>();
			if (create.schema) {
				objects.push_back({create.schema->ParentCatalog().GetName(), create.schema->name, info.view_name,
				                   "create view", {}});
			} else {
				objects.push_back({info.catalog, info.schema, info.view_name, "create view", {}});
			}
			break;
		}
		case LogicalOperatorType::LOGICAL_CREATE_SEQUENCE:
		case LogicalOperatorType::LOGICAL_CREATE_INDEX:
		case LogicalOperatorType::LOGICAL_CREATE_SCHEMA:
		case LogicalOperatorType::LOGICAL_CREATE_MACRO:
		case LogicalOperatorType::LOGICAL_CREATE_TYPE:
		case LogicalOperatorType::LOGICAL_CREATE_SECRET:
		case LogicalOperatorType::LOGICAL_DROP:
		case LogicalOperatorType::LOGICAL_ALTER:
		case LogicalOperatorType::LOGICAL_ATTACH:
		case LogicalOperatorType::LOGICAL_DETACH:
		case LogicalOperatorType::LOGICAL_VACUUM:
			objects.push_back({"", "", "", "ddl", {}});
			break;
		default:
			break;
		}
		VisitOperatorExpressions(op);
		VisitOperatorChildren(op);
	}

	static PlanObject Of(TableCatalogEntry &table, const char *action) {
		return {table.ParentCatalog().GetName(), table.schema.name, table.name, action, {}};
	}

protected:
	unique_ptr<Expression> VisitReplace(BoundFunctionExpression &expr, unique_ptr<Expression> *) override {
		functions.push_back(expr.function.name);
		return nullptr;
	}
	unique_ptr<Expression> VisitReplace(BoundAggregateExpression &expr, unique_ptr<Expression> *) override {
		functions.push_back(expr.function.name);
		return nullptr;
	}
	unique_ptr<Expression> VisitReplace(BoundWindowExpression &expr, unique_ptr<Expression> *) override {
		if (expr.aggregate) {
			functions.push_back(expr.aggregate->name);
		}
		return nullptr;
	}
	unique_ptr<Expression> VisitReplace(BoundSubqueryExpression &expr, unique_ptr<Expression> *) override {
		// A subquery the planner left unplanned: its body is not visible here.
		unreadable = true;
		return nullptr;
	}
};

void AddStrings(yyjson_mut_doc *doc, yyjson_mut_val *obj, const char *key, const vector<string> &values) {
	auto arr = yyjson_mut_arr(doc);
	for (auto &v : values) {
		yyjson_mut_arr_add_strcpy(doc, arr, v.c_str());
	}
	yyjson_mut_obj_add_val(doc, obj, key, arr);
}

char *WriteOut(yyjson_mut_doc *doc) {
	size_t len = 0;
	char *text = yyjson_mut_write(doc, 0, &len);
	char *out = text ? CopyOut(text, len) : nullptr;
	free(text);
	yyjson_mut_doc_free(doc);
	return out;
}


// The type `JsonExpr` would give a value of `type` (VARCHAR where it renders
// DuckDB's text; map keys that are not VARCHAR become VARCHAR).
LogicalType JsonType(const LogicalType &type, idx_t depth) {
	switch (type.id()) {
	case LogicalTypeId::INTERVAL:
	case LogicalTypeId::TIME_TZ:
	case LogicalTypeId::BIT:
	case LogicalTypeId::BIGNUM:
	case LogicalTypeId::GEOMETRY:
	case LogicalTypeId::TYPE:
		return LogicalType::VARCHAR;
	case LogicalTypeId::VARIANT:
		return LogicalType::JSON();
	case LogicalTypeId::UHUGEINT:
		return depth == 0 ? type : LogicalType::VARCHAR;
	case LogicalTypeId::LIST:
		return LogicalType::LIST(JsonType(ListType::GetChildType(type), depth + 1));
	case LogicalTypeId::ARRAY:
		return LogicalType::ARRAY(JsonType(ArrayType::GetChildType(type), depth + 1), ArrayType::GetSize(type));
	case LogicalTypeId::MAP:
		return LogicalType::MAP(LogicalType::VARCHAR, JsonType(MapType::ValueType(type), depth + 1));
	case LogicalTypeId::STRUCT: {
		child_list_t<LogicalType> children;
		for (auto &child : StructType::GetChildTypes(type)) {
			children.emplace_back(child.first, JsonType(child.second, depth + 1));
		}
		// Unnamed structs keep their empty names.
		return LogicalType::STRUCT(std::move(children));
	}
	case LogicalTypeId::UNION:
		for (idx_t i = 0; i < UnionType::GetMemberCount(type); i++) {
			auto &member = UnionType::GetMemberType(type, i);
			if (JsonType(member, depth + 1) != member) {
				return LogicalType::VARCHAR;
			}
		}
		return type;
	default:
		return type;
	}
}

// JSON from DuckDB's Arrow export is DuckDB's value for most types; for the
// rest DuckDB renders the value itself. Returns the expression that makes
// `e` (a value of `type`) JSON-ready, or "" when `e` needs nothing:
// INTERVAL (Arrow's nanoseconds overflow), TIME WITH TIME ZONE (Arrow drops
// the offset), BIT, BIGNUM and GEOMETRY (Arrow carries DuckDB's bytes) become
// DuckDB's VARCHAR text; so does UHUGEINT inside a nested value (Arrow's
// signed decimal; a top-level column is read back from its bits). A VARIANT
// becomes DuckDB's JSON of it (`CAST(v AS JSON)`), which the encoder writes
// as a JSON value where `JsonMarks` says. MAP keys that are not VARCHAR
// become their DuckDB text, so every JSON key is the key's value as DuckDB
// writes it. Lists, arrays, structs and maps are rebuilt around converted
// children; a UNION that holds any of these is DuckDB's text as a whole.
string JsonExpr(const LogicalType &type, const string &e, idx_t depth) {
	auto var = "duckgate_v" + to_string(depth);
	switch (type.id()) {
	case LogicalTypeId::VARIANT:
		return "CAST(" + e + " AS JSON)";
	case LogicalTypeId::INTERVAL:
	case LogicalTypeId::TIME_TZ:
	case LogicalTypeId::BIT:
	case LogicalTypeId::BIGNUM:
	case LogicalTypeId::GEOMETRY:
	case LogicalTypeId::TYPE:
		return "CAST(" + e + " AS VARCHAR)";
	case LogicalTypeId::UHUGEINT:
		return depth == 0 ? "" : "CAST(" + e + " AS VARCHAR)";
	case LogicalTypeId::LIST:
	case LogicalTypeId::ARRAY: {
		auto &child = type.id() == LogicalTypeId::LIST ? ListType::GetChildType(type) : ArrayType::GetChildType(type);
		auto inner = JsonExpr(child, var, depth + 1);
		if (inner.empty()) {
			return "";
		}
		return "list_transform(" + e + ", lambda " + var + ": " + inner + ")";
	}
	case LogicalTypeId::MAP: {
		// A cast, not a rebuilt map: DuckDB's map constructors refuse
		// duplicate keys, which a MAP can hold (TRY_CAST of
		// MAP(['1','01'], ...) to MAP(INTEGER, ...) gives {1=10, 1=20}),
		// and a cast of the whole map renders the leaves as the
		// expressions above would.
		auto target = JsonType(type, depth);
		if (target == type) {
			return "";
		}
		return "CAST(" + e + " AS " + target.ToString() + ")";
	}
	case LogicalTypeId::STRUCT: {
		auto &children = StructType::GetChildTypes(type);
		vector<string> parts;
		bool changed = false;
		for (idx_t i = 0; i < children.size(); i++) {
			auto field = "struct_extract_at(" + e + ", " + to_string(i + 1) + ")";
			auto inner = JsonExpr(children[i].second, field, depth + 1);
			changed = changed || !inner.empty();
			parts.push_back(inner.empty() ? field : inner);
		}
		if (!changed) {
			return "";
		}
		string body;
		if (StructType::IsUnnamed(type)) {
			body = "row(";
			for (idx_t i = 0; i < parts.size(); i++) {
				body += (i ? ", " : "") + parts[i];
			}
		} else {
			body = "struct_pack(";
			for (idx_t i = 0; i < parts.size(); i++) {
				body += (i ? ", " : "") + KeywordHelper::WriteOptionallyQuoted(children[i].first) + " := " + parts[i];
			}
		}
		return "CASE WHEN " + e + " IS NULL THEN NULL ELSE " + body + ") END";
	}
	case LogicalTypeId::UNION: {
		for (idx_t i = 0; i < UnionType::GetMemberCount(type); i++) {
			if (!JsonExpr(UnionType::GetMemberType(type, i), var, depth + 1).empty()) {
				return "CAST(" + e + " AS VARCHAR)";
			}
		}
		return "";
	}
	default:
		return "";
	}
}

// What DuckDB's Arrow export has no Arrow type for ("Unsupported Arrow type
// ..."), as the gateway sends it: a VARIANT as DuckDB's JSON of it (JSON
// text; DuckDB 1.5.5 has no Arrow form of VARIANT), a TYPE value as DuckDB's
// text of the type. The type a column of `type` has once mapped; `changed`
// says whether anything in it was.
LogicalType ArrowType(const LogicalType &type, bool &changed) {
	switch (type.id()) {
	case LogicalTypeId::VARIANT:
		changed = true;
		return LogicalType::JSON();
	case LogicalTypeId::TYPE:
		changed = true;
		return LogicalType::VARCHAR;
	case LogicalTypeId::LIST: {
		bool inner = false;
		auto child = ArrowType(ListType::GetChildType(type), inner);
		changed = changed || inner;
		return inner ? LogicalType::LIST(child) : type;
	}
	case LogicalTypeId::ARRAY: {
		bool inner = false;
		auto child = ArrowType(ArrayType::GetChildType(type), inner);
		changed = changed || inner;
		return inner ? LogicalType::ARRAY(child, ArrayType::GetSize(type)) : type;
	}
	case LogicalTypeId::MAP: {
		bool inner = false;
		auto key = ArrowType(MapType::KeyType(type), inner);
		auto value = ArrowType(MapType::ValueType(type), inner);
		changed = changed || inner;
		return inner ? LogicalType::MAP(key, value) : type;
	}
	case LogicalTypeId::STRUCT: {
		bool inner = false;
		child_list_t<LogicalType> children;
		for (auto &child : StructType::GetChildTypes(type)) {
			children.emplace_back(child.first, ArrowType(child.second, inner));
		}
		changed = changed || inner;
		return inner ? LogicalType::STRUCT(std::move(children)) : type;
	}
	case LogicalTypeId::UNION: {
		bool inner = false;
		child_list_t<LogicalType> members;
		for (idx_t i = 0; i < UnionType::GetMemberCount(type); i++) {
			members.emplace_back(UnionType::GetMemberName(type, i),
			                     ArrowType(UnionType::GetMemberType(type, i), inner));
		}
		changed = changed || inner;
		return inner ? LogicalType::UNION(std::move(members)) : type;
	}
	default:
		return type;
	}
}

// The expression that makes `e` (a value of `type`) exportable as Arrow
// (see `ArrowType`), or "" when DuckDB's export takes it as it is. Lists are
// rebuilt with `list_transform`, structs with `struct_pack` (`row` when
// unnamed: an unnamed struct's type cannot be written in a CAST); arrays,
// maps and unions are cast to their mapped type.
string ArrowExpr(const LogicalType &type, const string &e, idx_t depth) {
	auto var = "duckgate_a" + to_string(depth);
	switch (type.id()) {
	case LogicalTypeId::VARIANT:
		return "CAST(" + e + " AS JSON)";
	case LogicalTypeId::TYPE:
		return "CAST(" + e + " AS VARCHAR)";
	case LogicalTypeId::LIST: {
		auto inner = ArrowExpr(ListType::GetChildType(type), var, depth + 1);
		if (inner.empty()) {
			return "";
		}
		return "list_transform(" + e + ", lambda " + var + ": " + inner + ")";
	}
	case LogicalTypeId::STRUCT: {
		auto &children = StructType::GetChildTypes(type);
		vector<string> parts;
		bool changed = false;
		for (idx_t i = 0; i < children.size(); i++) {
			auto field = "struct_extract_at(" + e + ", " + to_string(i + 1) + ")";
			auto inner = ArrowExpr(children[i].second, field, depth + 1);
			changed = changed || !inner.empty();
			parts.push_back(inner.empty() ? field : inner);
		}
		if (!changed) {
			return "";
		}
		string body = StructType::IsUnnamed(type) ? "row(" : "struct_pack(";
		for (idx_t i = 0; i < parts.size(); i++) {
			body += i ? ", " : "";
			if (!StructType::IsUnnamed(type)) {
				body += KeywordHelper::WriteOptionallyQuoted(children[i].first) + " := ";
			}
			body += parts[i];
		}
		return "CASE WHEN " + e + " IS NULL THEN NULL ELSE " + body + ") END";
	}
	default: {
		bool changed = false;
		auto target = ArrowType(type, changed);
		if (!changed) {
			return "";
		}
		return "CAST(" + e + " AS " + target.ToString() + ")";
	}
	}
}

// Where the mapped values of a column of `type` are (see `ArrowType`), so
// the gateway can say so in the Arrow schema: each a path of child indexes
// (a list's or an array's element 0; a struct's field, a union's member and
// a map's key 0 or value 1 by position) and the DuckDB type it held
// (`VARIANT`, `TYPE`). `json`: the marks of `JsonType`'s value instead, its
// VARIANTs only (a union holding one is DuckDB's text as a whole there, and
// map keys are text).
void Marks(const LogicalType &type, bool json, vector<idx_t> &path, vector<std::pair<vector<idx_t>, string>> &out) {
	switch (type.id()) {
	case LogicalTypeId::VARIANT:
		out.emplace_back(path, "VARIANT");
		return;
	case LogicalTypeId::TYPE:
		if (!json) {
			out.emplace_back(path, "TYPE");
		}
		return;
	case LogicalTypeId::LIST:
	case LogicalTypeId::ARRAY:
		path.push_back(0);
		Marks(type.id() == LogicalTypeId::LIST ? ListType::GetChildType(type) : ArrayType::GetChildType(type), json,
		      path, out);
		path.pop_back();
		return;
	case LogicalTypeId::MAP:
		if (!json) {
			path.push_back(0);
			Marks(MapType::KeyType(type), json, path, out);
			path.pop_back();
		}
		path.push_back(1);
		Marks(MapType::ValueType(type), json, path, out);
		path.pop_back();
		return;
	case LogicalTypeId::STRUCT: {
		auto &children = StructType::GetChildTypes(type);
		for (idx_t i = 0; i < children.size(); i++) {
			path.push_back(i);
			Marks(children[i].second, json, path, out);
			path.pop_back();
		}
		return;
	}
	case LogicalTypeId::UNION:
		if (json && JsonType(type, path.size()) != type) {
			return;
		}
		for (idx_t i = 0; i < UnionType::GetMemberCount(type); i++) {
			path.push_back(i);
			Marks(UnionType::GetMemberType(type, i), json, path, out);
			path.pop_back();
		}
		return;
	default:
		return;
	}
}

// `Marks` of `type` as a JSON array of {"path": [...], "type": "..."}.
yyjson_mut_val *MarksJson(yyjson_mut_doc *doc, const LogicalType &type, bool json) {
	vector<idx_t> path;
	vector<std::pair<vector<idx_t>, string>> marks;
	Marks(type, json, path, marks);
	auto arr = yyjson_mut_arr(doc);
	for (auto &m : marks) {
		auto obj = yyjson_mut_arr_add_obj(doc, arr);
		auto p = yyjson_mut_arr(doc);
		for (auto i : m.first) {
			yyjson_mut_arr_add_uint(doc, p, i);
		}
		yyjson_mut_obj_add_val(doc, obj, "path", p);
		yyjson_mut_obj_add_strcpy(doc, obj, "type", m.second.c_str());
	}
	return arr;
}

} // namespace

// Runs a catalog query of one boolean with `values` bound and answers "1",
// "0", or NULL when it could not run. Materialized: a streaming result would
// leave its transaction open on this connection, and the guard's next plan
// would see the catalog as it was then. Never throws.
static char *CatalogExists(void *connection, const char *sql, vector<Value> values) {
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
		return CopyOut(found ? "1" : "0", 1);
	} catch (...) {
		return nullptr;
	}
}

// The error's place in the text DuckDB's parser read (a byte offset), as
// DuckDB records it in the error's extra info, where it does.
static void AddPosition(yyjson_mut_doc *doc, yyjson_mut_val *root, const ErrorData &error) {
	auto &extra = error.ExtraInfo();
	auto entry = extra.find("position");
	if (entry == extra.end()) {
		return;
	}
	try {
		yyjson_mut_obj_add_uint(doc, root, "position", std::stoull(entry->second));
	} catch (...) {
		// Not a number: no place.
	}
}

// Whether `statement` is, as a whole, one `SELECT * FROM <show>` as DuckDB's
// parser makes of `DESCRIBE x`, `SHOW x`, `SUMMARIZE x`, `SHOW TABLES`, ...:
// the kind (`describe`, `summarize`, `show`; NULL when it is not) and, for
// a DESCRIBE, the query whose columns it lists (its plan is discarded by the
// binder; NULL for the others, whose plans scan what they read).
static std::pair<const char *, QueryNode *> DescribedQuery(SQLStatement &statement) {
	if (statement.type != StatementType::SELECT_STATEMENT) {
		return {nullptr, nullptr};
	}
	auto &select = statement.Cast<SelectStatement>();
	if (!select.node || select.node->type != QueryNodeType::SELECT_NODE || !select.node->cte_map.map.empty() ||
	    !select.node->modifiers.empty()) {
		return {nullptr, nullptr};
	}
	auto &node = select.node->Cast<SelectNode>();
	if (!node.from_table || node.from_table->type != TableReferenceType::SHOW_REF || node.where_clause ||
	    !node.groups.group_expressions.empty() || node.having || node.qualify || node.sample ||
	    node.select_list.size() != 1 || node.select_list[0]->GetExpressionClass() != ExpressionClass::STAR) {
		return {nullptr, nullptr};
	}
	auto &show = node.from_table->Cast<ShowRef>();
	switch (show.show_type) {
	case ShowType::DESCRIBE:
		if (!show.query) {
			return {nullptr, nullptr};
		}
		return {"describe", show.query.get()};
	case ShowType::SUMMARY:
		return {"summarize", nullptr};
	default:
		return {show.query ? nullptr : "show", nullptr};
	}
}

extern "C" {

// Binds `sql` (one statement) on `connection` in a transaction of its own and
// lists what its plan calls and scans, unoptimized: {"functions": [...],
// "tables": [...], "unreadable": bool}, or {"error": ..., "error_type": ...,
// "position": byte offset into DuckDB's reading of `sql`, where DuckDB says}.
// Binding may read files (a reader's schema): call it only after the paths
// passed the guard. Never throws.
char *duckgate_plan_names(void *connection, const char *sql) {
	yyjson_mut_doc *doc = yyjson_mut_doc_new(nullptr);
	if (!doc) {
		return nullptr;
	}
	auto root = yyjson_mut_obj(doc);
	yyjson_mut_doc_set_root(doc, root);
	try {
		auto conn = reinterpret_cast<Connection *>(connection);
		auto &context = *conn->context;
		PlanNames names;
		vector<string> types;
		vector<string> columns;
		vector<string> json_exprs;
		vector<string> arrow_exprs;
		auto json_marks = yyjson_mut_arr(doc);
		auto arrow_marks = yyjson_mut_arr(doc);
		vector<string> modified;
		vector<string> read;
		const char *described_kind = nullptr;
		// Every view the binder expands, at any depth (a view's binder
		// inherits the callback): a view is granted like a table, and its
		// plan shows only what it reads.
		auto views = [&names](CatalogEntry &entry) {
			if (entry.type != CatalogType::VIEW_ENTRY) {
				return;
			}
			auto &view = entry.Cast<ViewCatalogEntry>();
			PlanObject object {view.ParentCatalog().GetName(), view.schema.name, view.name, "view", {}};
			for (auto &o : names.objects) {
				if (o.action == object.action && o.catalog == object.catalog && o.schema == object.schema &&
				    o.name == object.name) {
					return;
				}
			}
			names.objects.push_back(std::move(object));
		};
		context.RunFunctionInTransaction([&]() {
			Parser parser(context.GetParserOptions());
			parser.ParseQuery(string(sql));
			if (parser.statements.size() != 1) {
				throw InvalidInputException("expected exactly one statement");
			}
			// `DESCRIBE x`, `SHOW x`, `SUMMARIZE x`, `SHOW TABLES`: DuckDB's
			// binder answers a DESCRIBE from the plan of its query and keeps
			// only the result's column list, so that query is planned here too
			// and what it reads counts as read (the caller learns its columns).
			auto described = DescribedQuery(*parser.statements[0]);
			if (described.first) {
				described_kind = described.first;
				if (described.second) {
					auto inner = make_uniq<SelectStatement>();
					inner->node = described.second->Copy();
					Planner inner_planner(context);
					inner_planner.binder->EntryRetriever().SetCallback(views);
					inner_planner.CreatePlan(std::move(inner));
					if (inner_planner.plan) {
						names.VisitOperator(*inner_planner.plan);
					}
				}
			}
			Planner planner(context);
			planner.binder->EntryRetriever().SetCallback(views);
			planner.CreatePlan(std::move(parser.statements[0]));
			if (planner.plan) {
				names.VisitOperator(*planner.plan);
			}
			// DuckDB's own account of the databases the statement reads and
			// changes (what its read-only transactions check): an EXPLAIN
			// ANALYZE of a write, an INSERT's target, a DROP's catalog.
			for (auto &entry : planner.properties.modified_databases) {
				modified.push_back(entry.first);
			}
			for (auto &entry : planner.properties.read_databases) {
				read.push_back(entry.first);
			}
			for (idx_t i = 0; i < planner.types.size(); i++) {
				types.push_back(planner.types[i].ToString());
				json_exprs.push_back(JsonExpr(planner.types[i], "#" + to_string(i + 1), 0));
				arrow_exprs.push_back(ArrowExpr(planner.types[i], "#" + to_string(i + 1), 0));
				yyjson_mut_arr_append(json_marks, MarksJson(doc, planner.types[i], true));
				yyjson_mut_arr_append(arrow_marks, MarksJson(doc, planner.types[i], false));
			}
			columns = planner.names;
		});
		AddStrings(doc, root, "functions", names.functions);
		AddStrings(doc, root, "tables", names.tables);
		yyjson_mut_obj_add_bool(doc, root, "unreadable", names.unreadable);
		AddStrings(doc, root, "types", types);
		AddStrings(doc, root, "names", columns);
		AddStrings(doc, root, "json_exprs", json_exprs);
		yyjson_mut_obj_add_val(doc, root, "json_marks", json_marks);
		AddStrings(doc, root, "arrow_exprs", arrow_exprs);
		yyjson_mut_obj_add_val(doc, root, "arrow_marks", arrow_marks);
		AddStrings(doc, root, "modified", modified);
		AddStrings(doc, root, "read", read);
		auto objects = yyjson_mut_arr(doc);
		for (auto &o : names.objects) {
			auto obj = yyjson_mut_arr_add_obj(doc, objects);
			yyjson_mut_obj_add_strcpy(doc, obj, "catalog", o.catalog.c_str());
			yyjson_mut_obj_add_strcpy(doc, obj, "schema", o.schema.c_str());
			yyjson_mut_obj_add_strcpy(doc, obj, "name", o.name.c_str());
			yyjson_mut_obj_add_strcpy(doc, obj, "action", o.action.c_str());
			AddStrings(doc, obj, "columns", o.columns);
		}
		yyjson_mut_obj_add_val(doc, root, "objects", objects);
		AddStrings(doc, root, "sources", names.sources);
		auto reads = yyjson_mut_arr(doc);
		for (auto &r : names.reads) {
			auto obj = yyjson_mut_arr_add_obj(doc, reads);
			yyjson_mut_obj_add_strcpy(doc, obj, "function", r.function.c_str());
			AddStrings(doc, obj, "paths", r.paths);
		}
		yyjson_mut_obj_add_val(doc, root, "reads", reads);
		if (described_kind) {
			yyjson_mut_obj_add_str(doc, root, "described", described_kind);
		}
	} catch (std::exception &ex) {
		ErrorData error(ex);
		root = yyjson_mut_obj(doc);
		yyjson_mut_doc_set_root(doc, root);
		yyjson_mut_obj_add_strcpy(doc, root, "error", error.RawMessage().c_str());
		yyjson_mut_obj_add_strcpy(doc, root, "error_type", Exception::ExceptionTypeToString(error.Type()).c_str());
		AddPosition(doc, root, error);
	} catch (...) {
		root = yyjson_mut_obj(doc);
		yyjson_mut_doc_set_root(doc, root);
		yyjson_mut_obj_add_str(doc, root, "error", "the statement could not be bound");
		yyjson_mut_obj_add_str(doc, root, "error_type", "Binder");
	}
	return WriteOut(doc);
}


// Describes every statement of `sql` (NUL-terminated) as read by DuckDB's
// parser with the connection's parser options. Returns a malloc'd JSON text
// that the caller frees with `duckgate_describe_free`, or NULL when memory
// runs out. Never throws: a parse error is a document `{"error": "...",
// "position": ...}` (the byte offset into DuckDB's reading of `sql`, where
// DuckDB says).
char *duckgate_describe_sql(void *connection, const char *sql) {
	yyjson_mut_doc *doc = yyjson_mut_doc_new(nullptr);
	if (!doc) {
		return nullptr;
	}
	auto root = yyjson_mut_obj(doc);
	yyjson_mut_doc_set_root(doc, root);
	try {
		ParserOptions options;
		if (connection) {
			auto conn = reinterpret_cast<Connection *>(connection);
			options = conn->context->GetParserOptions();
		}
		Parser parser(options);
		parser.ParseQuery(string(sql));
		auto statements = yyjson_mut_arr(doc);
		for (auto &statement : parser.statements) {
			auto described = Describe(doc, *statement);
			// A query's own text as DuckDB parsed it (`query`: the statement's
			// span of the text DuckDB read, after it replaced Unicode blanks;
			// the span's offsets are not into the client's text), for
			// wrapping it so DuckDB renders values as text. Not DuckDB's
			// ToString: re-rendering changes literal types (`42.`, `1e-1`).
			// The span runs on past the terminating semicolon (to a trailing
			// comment, say): it is cut at the last token when DuckDB's
			// tokenizer says that is `;`. The wrapper is judged by the guard
			// again before it runs.
			if (statement->type == StatementType::SELECT_STATEMENT && !statement->query.empty()) {
				auto own = statement->query;
				for (;;) {
					auto tokens = Parser::Tokenize(own);
					idx_t last = tokens.size();
					while (last > 0 && tokens[last - 1].type == SimplifiedTokenType::SIMPLIFIED_TOKEN_COMMENT) {
						last--;
					}
					if (last == 0 || tokens[last - 1].start >= own.size() || own[tokens[last - 1].start] != ';') {
						break;
					}
					own.resize(tokens[last - 1].start);
				}
				yyjson_mut_obj_add_strncpy(doc, described, "sql", own.data(), own.size());
			}
			yyjson_mut_arr_append(statements, described);
		}
		yyjson_mut_obj_add_val(doc, root, "statements", statements);
	} catch (std::exception &ex) {
		ErrorData error(ex);
		root = yyjson_mut_obj(doc);
		yyjson_mut_doc_set_root(doc, root);
		yyjson_mut_obj_add_strcpy(doc, root, "error", error.Message().c_str());
		AddPosition(doc, root, error);
	} catch (...) {
		root = yyjson_mut_obj(doc);
		yyjson_mut_doc_set_root(doc, root);
		yyjson_mut_obj_add_str(doc, root, "error", "the SQL text could not be parsed");
	}
	size_t len = 0;
	char *text = yyjson_mut_write(doc, 0, &len);
	char *out = text ? CopyOut(text, len) : nullptr;
	free(text);
	yyjson_mut_doc_free(doc);
	return out;
}

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

void duckgate_describe_free(char *text) {
	free(text);
}

} // extern "C"
