// The SQL that renders a result column for the JSON and Arrow encoders where
// DuckDB's own value would not do (intervals, TIME WITH TIME ZONE, map keys
// that are not text, ...), and which nested paths need it.

#include "describe.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_guard {

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

} // namespace duckgate_guard
