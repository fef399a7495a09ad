// The policy document the gateway sends (`engine::policy::Document`, serialized
// by serde): read into the connection's `PolicyState`. Claims become DuckDB
// values by their exact name and dotted path.

#include "policy.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_policy {

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
	duckgate_shim::JsonDoc doc(yyjson_read(spec, len, 0));
	if (!doc) {
		throw InvalidInputException("policy: not JSON");
	}
	auto state = make_shared_ptr<PolicyState>();
	{
		auto root = yyjson_doc_get_root(doc.get());
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
	}
	return state;
}

} // namespace duckgate_policy
