// Deep nesting must fail a query, never the process.
//
// DuckDB recurses once per nesting level in places, and a thread that runs
// out of stack takes the whole process with it (SIGSEGV on the guard page,
// or Rust's "has overflowed its stack" abort). Two measures, both here:
//
// 1. Threads that run DuckDB get stacks that fit what it needs. The
//    gateway's own threads are sized where they are made (tokio's builder);
//    DuckDB's scheduler threads are made with the process's default thread
//    attributes (std::thread, no attributes of its own), which
//    `duckgate_set_default_thread_stack` raises before the database opens.
//
// 2. JSON documents that DuckDB walks recursively are capped in depth. A
//    document is a string a query can build for a few bytes of SQL
//    (`repeat('[', 1000000)`), so no stack is deep enough for every
//    document: `json_structure` of 100,000 levels overflows DuckDB's own
//    8 MiB main thread, a JSON -> VARIANT cast of 10,000 objects does. The
//    functions whose C++ recurses on the document (measured, see
//    tests/it/venv/nesting.rs) are wrapped in the system catalog so that every
//    string argument is scanned first (one pass over its bytes, no
//    recursion) and a document deeper than the cap fails the query with
//    DuckDB's own InvalidInputException, which the gateway answers with
//    400. The other JSON functions (extraction, validation, json_each,
//    json_tree, casts to typed values) read documents iteratively or as deep
//    as their path or target type, which the parser bounds.
//
// Both touch DuckDB's catalog and cast set once, at start-up, before any
// client query runs; a binding copies the (wrapped) function from the
// catalog entry, so every later query sees the wrapper.

#include "shims.h"
#include "duckdb.hpp"
#include "duckdb/catalog/catalog.hpp"
#include "duckdb/catalog/catalog_entry/scalar_function_catalog_entry.hpp"
#include "duckdb/common/exception.hpp"
#include "duckdb/common/types/vector.hpp"
#include "duckdb/function/cast/cast_function_set.hpp"
#include "duckdb/main/client_context.hpp"
#include "duckdb/main/config.hpp"
#include "duckdb/main/connection.hpp"

#include "json_structure.hpp"

#include <dlfcn.h>
#include <pthread.h>

using namespace duckdb;

namespace {

// The deepest a JSON document may nest; set once before the wrappers run.
idx_t max_json_depth = 0;

// The nesting depth of `text` read as JSON: brackets and braces outside
// strings (a backslash escapes the next byte inside one). Text that is not
// JSON gets some number; DuckDB's reader then refuses it on its own.
idx_t JsonDepth(const char *data, idx_t size, idx_t stop_at) {
	idx_t depth = 0;
	idx_t deepest = 0;
	bool in_string = false;
	for (idx_t i = 0; i < size; i++) {
		auto c = data[i];
		if (in_string) {
			if (c == '\\') {
				i++;
			} else if (c == '"') {
				in_string = false;
			}
			continue;
		}
		switch (c) {
		case '"':
			in_string = true;
			break;
		case '[':
		case '{':
			if (++depth > deepest) {
				deepest = depth;
				if (deepest > stop_at) {
					return deepest;
				}
			}
			break;
		case ']':
		case '}':
			if (depth > 0) {
				depth--;
			}
			break;
		default:
			break;
		}
	}
	return deepest;
}

// Throws DuckDB's InvalidInputException when a string of `input` nests
// deeper than the cap.
void CheckDepth(Vector &input, idx_t count, const string &function) {
	if (input.GetType().InternalType() != PhysicalType::VARCHAR) {
		return;
	}
	UnifiedVectorFormat format;
	input.ToUnifiedFormat(count, format);
	auto strings = UnifiedVectorFormat::GetData<string_t>(format);
	for (idx_t i = 0; i < count; i++) {
		auto index = format.sel->get_index(i);
		if (!format.validity.RowIsValid(index)) {
			continue;
		}
		auto &s = strings[index];
		if (max_json_depth != 0 && JsonDepth(s.GetData(), s.GetSize(), max_json_depth) > max_json_depth) {
			throw InvalidInputException("%s: a JSON document nests deeper than %llu levels, the most this gateway "
			                            "reads (DuckDB walks such documents recursively)",
			                            function, max_json_depth);
		}
	}
}

// The scalar functions whose C++ recurses on a document's depth.
const char *const RECURSIVE_JSON_FUNCTIONS[] = {
    "json_structure", "json_merge_patch", "json_contains",       "json_transform",
    "json_transform_strict", "from_json",   "from_json_strict",
};

void WrapFunction(ScalarFunction &function, const string &name) {
	auto original = function.GetFunctionCallback();
	function.SetFunctionCallback([original, name](DataChunk &args, ExpressionState &state, Vector &result) {
		for (idx_t i = 0; i < args.ColumnCount(); i++) {
			CheckDepth(args.data[i], args.size(), name);
		}
		original(args, state, result);
	});
}

// A JSON -> VARIANT cast that checks the depth first, then runs DuckDB's.
struct CappedCastData : public BoundCastData {
	explicit CappedCastData(BoundCastInfo original_p) : original(std::move(original_p)) {
	}
	BoundCastInfo original;

	unique_ptr<BoundCastData> Copy() const override {
		return make_uniq<CappedCastData>(original.Copy());
	}
};

bool CappedCast(Vector &source, Vector &result, idx_t count, CastParameters &parameters) {
	auto &data = parameters.cast_data->Cast<CappedCastData>();
	CheckDepth(source, count, "CAST(JSON AS VARIANT)");
	CastParameters inner(parameters, data.original.cast_data.get(), parameters.local_state);
	return data.original.function(source, result, count, inner);
}

unique_ptr<FunctionLocalState> CappedCastInit(CastLocalStateParameters &parameters) {
	auto &data = parameters.cast_data->Cast<CappedCastData>();
	if (!data.original.init_local_state) {
		return nullptr;
	}
	CastLocalStateParameters inner(parameters, data.original.cast_data.get());
	return data.original.init_local_state(inner);
}

} // namespace

#ifdef DUCKGATE_INTERPOSE_JSON_STRUCTURE
// DuckDB's JSON structure extraction (json_structure, json_group_structure
// and read_json's schema detection, over any file the gateway may read)
// recurses once per level of a document and has no limit of its own: a
// file of 1,000,000 nested brackets overflowed a 64 MiB stack in
// read_json, even with `maximum_depth` set. The official library calls this
// function through its PLT, its recursive calls too, so the binary's
// definition (exported, see build.rs) takes their place: it counts the
// levels on this thread and refuses past the cap with DuckDB's own
// InvalidInputException, then calls the library's. (A DuckDB built from
// source is linked statically: no PLT, no interposition; the catalog
// wrappers above still cap the scalar functions.)
namespace duckdb {

void JSONStructure::ExtractStructure(yyjson_val *val, JSONStructureNode &node, const bool ignore_errors) {
	using extract_t = void (*)(yyjson_val *, JSONStructureNode &, bool);
	static extract_t library = reinterpret_cast<extract_t>(dlsym(
	    RTLD_NEXT,
	    "_ZN6duckdb13JSONStructure16ExtractStructureEPN13duckdb_yyjson10yyjson_valERNS_17JSONStructureNodeEb"));
	thread_local idx_t depth = 0;
	if (!library) {
		throw InternalException("duckgate: DuckDB's JSON structure extraction was not found");
	}
	if (max_json_depth != 0 && depth >= max_json_depth) {
		throw InvalidInputException("a JSON document nests deeper than %llu levels, the most this gateway reads "
		                            "(DuckDB walks such documents recursively)",
		                            max_json_depth);
	}
	struct Level {
		idx_t &d;
		explicit Level(idx_t &d_p) : d(d_p) {
			d++;
		}
		~Level() {
			d--;
		}
	} level(depth);
	library(val, node, ignore_errors);
}

} // namespace duckdb
#endif

extern "C" {

// Threads made afterwards with default attributes (DuckDB's scheduler
// threads) get `bytes` of stack. 0 on success.
int duckgate_set_default_thread_stack(uint64_t bytes) {
	pthread_attr_t attr;
	if (pthread_getattr_default_np(&attr) != 0) {
		return 1;
	}
	int rc = pthread_attr_setstacksize(&attr, static_cast<size_t>(bytes));
	if (rc == 0) {
		rc = pthread_setattr_default_np(&attr);
	}
	pthread_attr_destroy(&attr);
	return rc == 0 ? 0 : 2;
}

// The stack size of the calling thread in bytes, 0 when unknown.
uint64_t duckgate_current_thread_stack() {
	pthread_attr_t attr;
	if (pthread_getattr_np(pthread_self(), &attr) != 0) {
		return 0;
	}
	size_t size = 0;
	pthread_attr_getstacksize(&attr, &size);
	pthread_attr_destroy(&attr);
	return size;
}

// Caps the depth of the JSON documents DuckDB walks recursively at
// `max_depth` levels, for the database of `connection` (a
// `duckdb::Connection*`). Call once, before any client query. 0 on
// success, 1 when a function or the cast was not where DuckDB 1.5.5 has it
// (the gateway refuses to start: see the upgrade checklist).
int duckgate_cap_json_depth(void *connection, uint64_t max_depth) {
	try {
		max_json_depth = max_depth;
		auto conn = reinterpret_cast<Connection *>(connection);
		auto &context = *conn->context;
		bool found_all = true;
		context.RunFunctionInTransaction([&]() {
			auto &catalog = Catalog::GetSystemCatalog(context);
			for (auto name : RECURSIVE_JSON_FUNCTIONS) {
				auto entry = catalog.GetEntry<ScalarFunctionCatalogEntry>(context, DEFAULT_SCHEMA, name,
				                                                            OnEntryNotFound::RETURN_NULL);
				if (!entry) {
					found_all = false;
					continue;
				}
				for (auto &function : entry->functions.functions) {
					WrapFunction(function, name);
				}
			}
		});
		auto &casts = DBConfig::GetConfig(context).GetCastFunctions();
		GetCastFunctionInput input(context);
		auto original = casts.GetCastFunction(LogicalType::JSON(), LogicalType::VARIANT(), input);
		if (!original.function) {
			return 1;
		}
		auto cost = casts.ImplicitCastCost(context, LogicalType::JSON(), LogicalType::VARIANT());
		casts.RegisterCastFunction(
		    LogicalType::JSON(), LogicalType::VARIANT(),
		    BoundCastInfo(CappedCast, make_uniq<CappedCastData>(std::move(original)), CappedCastInit), cost);
		return found_all ? 0 : 1;
	} catch (...) {
		return 2;
	}
}

} // extern "C"
