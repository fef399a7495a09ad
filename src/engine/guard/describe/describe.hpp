// The guard shim's shared declarations: DuckDB's own reading of a client's
// SQL for the statement guard (see parse.cpp), its plan's names (plan.cpp),
// the result types the encoders need (types.cpp), catalog questions
// (catalog.cpp), and the JSON documents they answer with (write.cpp).
#ifndef DUCKGATE_GUARD_DESCRIBE_HPP
#define DUCKGATE_GUARD_DESCRIBE_HPP

#include "../../shims.h"
#include "../../shim_support.hpp"
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

namespace duckgate_guard {

using namespace duckdb;
using namespace duckdb_yyjson;

// parse.cpp
yyjson_mut_val *Describe(yyjson_mut_doc *doc, SQLStatement &statement);
std::pair<const char *, QueryNode *> DescribedQuery(SQLStatement &statement);
// types.cpp
string JsonExpr(const LogicalType &type, const string &e, idx_t depth);
string ArrowExpr(const LogicalType &type, const string &e, idx_t depth);
yyjson_mut_val *MarksJson(yyjson_mut_doc *doc, const LogicalType &type, bool json);
// catalog.cpp
char *CatalogExists(void *connection, const char *sql, vector<Value> values);
// write.cpp
void AddStrings(yyjson_mut_doc *doc, yyjson_mut_val *obj, const char *key, const vector<string> &values);
void AddPosition(yyjson_mut_doc *doc, yyjson_mut_val *root, const ErrorData &error);
char *WriteOut(yyjson_mut_doc *doc);

} // namespace duckgate_guard

#endif
