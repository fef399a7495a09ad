// What a bound plan reads, calls and changes, by DuckDB's own binder: the
// guard's second look, after the parse, at a statement it may run.

#include "describe.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_guard {

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

// C linkage, declared in shims.h: the same functions wherever declared.
extern "C" {

// Binds `sql` (one statement) on `connection` in a transaction of its own and
// lists what its plan calls and scans, unoptimized: {"functions": [...],
// "tables": [...], "unreadable": bool}, or {"error": ..., "error_type": ...,
// "position": byte offset into DuckDB's reading of `sql`, where DuckDB says}.
// Binding may read files (a reader's schema): call it only after the paths
// passed the guard. Never throws.
char *duckgate_plan_names(void *connection, const char *sql) {
	duckgate_shim::MutJsonDoc owner(yyjson_mut_doc_new(nullptr));
	if (!owner) {
		return nullptr;
	}
	auto doc = owner.get();
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

} // extern "C"

} // namespace duckgate_guard
