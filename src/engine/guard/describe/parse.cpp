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

#include "describe.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_guard {

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

} // namespace

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


// Whether `statement` is, as a whole, one `SELECT * FROM <show>` as DuckDB's
// parser makes of `DESCRIBE x`, `SHOW x`, `SUMMARIZE x`, `SHOW TABLES`, ...:
// the kind (`describe`, `summarize`, `show`; NULL when it is not) and, for
// a DESCRIBE, the query whose columns it lists (its plan is discarded by the
// binder; NULL for the others, whose plans scan what they read).
std::pair<const char *, QueryNode *> DescribedQuery(SQLStatement &statement) {
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

// C linkage, declared in shims.h: the same functions wherever declared.
extern "C" {

// Describes every statement of `sql` (NUL-terminated) as read by DuckDB's
// parser with the connection's parser options. Returns a malloc'd JSON text
// that the caller frees with `duckgate_describe_free`, or NULL when memory
// runs out. Never throws: a parse error is a document `{"error": "...",
// "position": ...}` (the byte offset into DuckDB's reading of `sql`, where
// DuckDB says).
char *duckgate_describe_sql(void *connection, const char *sql) {
	duckgate_shim::MutJsonDoc owner(yyjson_mut_doc_new(nullptr));
	if (!owner) {
		return nullptr;
	}
	auto doc = owner.get();
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
	return WriteOut(doc);
}

} // extern "C"

} // namespace duckgate_guard
