// The JSON documents the guard shim answers with, written and copied out for
// Rust (which frees them with `duckgate_describe_free`).

#include "describe.hpp"

using namespace duckdb;
using namespace duckdb_yyjson;

namespace duckgate_guard {

void AddStrings(yyjson_mut_doc *doc, yyjson_mut_val *obj, const char *key, const vector<string> &values) {
	auto arr = yyjson_mut_arr(doc);
	for (auto &v : values) {
		yyjson_mut_arr_add_strcpy(doc, arr, v.c_str());
	}
	yyjson_mut_obj_add_val(doc, obj, key, arr);
}

// The error's place in the text DuckDB's parser read (a byte offset), as
// DuckDB records it in the error's extra info, where it does.
void AddPosition(yyjson_mut_doc *doc, yyjson_mut_val *root, const ErrorData &error) {
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

char *WriteOut(yyjson_mut_doc *doc) {
	size_t len = 0;
	char *text = yyjson_mut_write(doc, 0, &len);
	char *out = text ? duckgate_shim::CopyOut(text, len) : nullptr;
	free(text);
	return out;
}

// C linkage, declared in shims.h: the same functions wherever declared.
extern "C" {

void duckgate_describe_free(char *text) {
	duckgate_shim::FreeText(text);
}

} // extern "C"

} // namespace duckgate_guard
