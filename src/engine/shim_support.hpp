// What every shim that hands text back to Rust or reads JSON shares, not
// part of the C ABI (that is `shims.h`): one copy-out and one free for the
// malloc'd texts the C functions return, and owners for yyjson's documents
// so that no early return or exception leaks one. Header-only and `inline`,
// as shim_context.hpp, so that the shims compile as one unit or apart.
#ifndef DUCKGATE_SHIM_SUPPORT_HPP
#define DUCKGATE_SHIM_SUPPORT_HPP

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "yyjson.hpp"

namespace duckgate_shim {

// `len` bytes of `data` as a malloc'd, NUL-terminated text for Rust, which
// gives it back to `FreeText` through the shim's `*_free` function; null if
// memory ran out.
inline char *CopyOut(const char *data, size_t len) {
	auto out = static_cast<char *>(malloc(len + 1));
	if (!out) {
		return nullptr;
	}
	memcpy(out, data, len);
	out[len] = '\0';
	return out;
}

inline char *CopyOut(const std::string &text) {
	return CopyOut(text.data(), text.size());
}

// Frees a text `CopyOut` made (null is fine).
inline void FreeText(char *text) {
	free(text);
}

struct JsonDocFree {
	void operator()(duckdb_yyjson::yyjson_doc *doc) const {
		duckdb_yyjson::yyjson_doc_free(doc);
	}
	void operator()(duckdb_yyjson::yyjson_mut_doc *doc) const {
		duckdb_yyjson::yyjson_mut_doc_free(doc);
	}
};

// A parsed (read-only) yyjson document, freed when it goes out of scope.
using JsonDoc = std::unique_ptr<duckdb_yyjson::yyjson_doc, JsonDocFree>;
// A yyjson document being written, freed when it goes out of scope.
using MutJsonDoc = std::unique_ptr<duckdb_yyjson::yyjson_mut_doc, JsonDocFree>;

} // namespace duckgate_shim

#endif
