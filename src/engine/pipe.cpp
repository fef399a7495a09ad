// DuckDB's own CSV writer, streamed to an HTTP client.
//
// A CSV answer is what `COPY (query) TO 'file' (FORMAT csv, HEADER)` writes:
// DuckDB casts, quotes and writes in one parallel pipeline, faster than
// exporting Arrow strings and writing them again, and equal to DuckDB's own
// CSV by construction. The gateway runs that COPY with a target only this
// file system handles (`duckgate-pipe://csv`): every write of the file is
// handed to a callback (Rust, `pipe.rs`) with the id of the connection whose
// COPY wrote it, and the callback forwards the bytes to that connection's
// HTTP body. The file system holds no data and refuses to be read; opening
// the path for writing fails unless the gateway waits for that connection's
// output, so a COPY nobody streams ends at once.
//
// It also checks the COPY text the gateway builds: DuckDB's parser must read
// it as exactly one COPY of exactly the query the guard judged to this
// target, with only the options the gateway gives.

#include "shims.h"
#include "duckdb.hpp"
#include "duckdb/common/file_opener.hpp"
#include "duckdb/common/file_system.hpp"
#include "duckdb/main/capi/capi_internal.hpp"
#include "duckdb/main/client_context.hpp"
#include "duckdb/main/database.hpp"
#include "duckdb/parser/expression/columnref_expression.hpp"
#include "duckdb/parser/parser.hpp"
#include "duckdb/parser/statement/copy_statement.hpp"
#include "duckdb/parser/expression/star_expression.hpp"
#include "duckdb/parser/query_node/select_node.hpp"
#include "duckdb/parser/result_modifier.hpp"
#include "duckdb/parser/statement/select_statement.hpp"
#include "duckdb/parser/tableref/subqueryref.hpp"

#include <cstring>

using namespace duckdb;

// Called with the database's token and the connection id on open (non-zero: nobody waits for it) and
// with each write (non-zero: stop, the output is closed).
// (duckgate_pipe_open_fn and duckgate_pipe_write_fn: shims.h)

static const char *PIPE_PREFIX = "duckgate-pipe://";
// The only paths that open: the targets of the gateway's COPY, one per format
// DuckDB writes for it.
static bool IsPipeTarget(const string &path) {
	return path == "duckgate-pipe://csv" || path == "duckgate-pipe://parquet";
}

namespace {

class DuckgatePipeHandle : public FileHandle {
public:
	DuckgatePipeHandle(FileSystem &fs, const string &path, FileOpenFlags flags, uint64_t token, uint64_t connection_id)
	    : FileHandle(fs, path, flags), token(token), connection_id(connection_id) {
	}
	void Close() override {
	}
	uint64_t token;
	uint64_t connection_id;
	int64_t written = 0;
};

class DuckgatePipeFileSystem : public FileSystem {
public:
	DuckgatePipeFileSystem(uint64_t token, duckgate_pipe_open_fn open_fn, duckgate_pipe_write_fn write_fn)
	    : token(token), open_fn(open_fn), write_fn(write_fn) {
	}

	unique_ptr<FileHandle> OpenFile(const string &path, FileOpenFlags flags,
	                                 optional_ptr<FileOpener> opener) override {
		if (!IsPipeTarget(path) || flags.OpenForReading() || !flags.OpenForWriting()) {
			throw PermissionException("%s can only be written", path);
		}
		auto context = FileOpener::TryGetClientContext(opener);
		if (!context) {
			throw IOException("%s is written only by a connection's query", path);
		}
		auto id = context->GetConnectionId();
		if (open_fn(token, id) != 0) {
			throw IOException("nothing reads %s for this connection", path);
		}
		return make_uniq<DuckgatePipeHandle>(*this, path, flags, token, id);
	}

	int64_t Write(FileHandle &handle, void *buffer, int64_t nr_bytes) override {
		auto &pipe = handle.Cast<DuckgatePipeHandle>();
		if (nr_bytes <= 0) {
			return 0;
		}
		if (write_fn(pipe.token, pipe.connection_id, static_cast<const uint8_t *>(buffer), uint64_t(nr_bytes)) != 0) {
			throw IOException("the client's answer was closed");
		}
		pipe.written += nr_bytes;
		return nr_bytes;
	}

	void Write(FileHandle &handle, void *buffer, int64_t nr_bytes, idx_t location) override {
		auto &pipe = handle.Cast<DuckgatePipeHandle>();
		if (int64_t(location) != pipe.written) {
			throw IOException("%s is written in order only", handle.path);
		}
		Write(handle, buffer, nr_bytes);
	}

	int64_t GetFileSize(FileHandle &handle) override {
		return handle.Cast<DuckgatePipeHandle>().written;
	}
	void FileSync(FileHandle &) override {
	}
	bool FileExists(const string &, optional_ptr<FileOpener>) override {
		return false;
	}
	bool DirectoryExists(const string &, optional_ptr<FileOpener>) override {
		return false;
	}
	bool TryRemoveFile(const string &, optional_ptr<FileOpener>) override {
		return false;
	}
	bool CanHandleFile(const string &fpath) override {
		return StringUtil::StartsWith(fpath, PIPE_PREFIX);
	}
	string CanonicalizePath(const string &path, optional_ptr<FileOpener>) override {
		return path;
	}
	bool OnDiskFile(FileHandle &) override {
		return false;
	}
	bool CanSeek() override {
		return false;
	}
	std::string GetName() const override {
		return "DuckgatePipeFileSystem";
	}

private:
	uint64_t token;
	duckgate_pipe_open_fn open_fn;
	duckgate_pipe_write_fn write_fn;
};

} // namespace

extern "C" {

// Registers the pipe file system with the database. 0 on success.
int duckgate_pipe_register(void *database, uint64_t token, duckgate_pipe_open_fn open_fn,
                           duckgate_pipe_write_fn write_fn) {
	try {
		auto wrapper = static_cast<DatabaseWrapper *>(database);
		if (!wrapper || !wrapper->database || !open_fn || !write_fn) {
			return 1;
		}
		auto &instance = *wrapper->database->instance;
		instance.GetFileSystem().RegisterSubSystem(make_uniq<DuckgatePipeFileSystem>(token, open_fn, write_fn));
		return 0;
	} catch (...) {
		return 2;
	}
}

// 1 when `copy_sql` is, by DuckDB's parser, exactly one `COPY (<select>) TO
// <target>` whose query equals the one statement `select_sql` holds, with no
// options but FORMAT <format> (csv or parquet), USE_TMP_FILE and, for csv,
// HEADER; else 0.
int duckgate_copy_matches(const char *copy_sql, const char *select_sql, const char *target, const char *format) {
	try {
		Parser copy_parser;
		copy_parser.ParseQuery(string(copy_sql));
		Parser select_parser;
		select_parser.ParseQuery(string(select_sql));
		if (copy_parser.statements.size() != 1 || select_parser.statements.size() != 1) {
			return 0;
		}
		auto &copy_stmt = *copy_parser.statements[0];
		auto &select_stmt = *select_parser.statements[0];
		if (copy_stmt.type != StatementType::COPY_STATEMENT || select_stmt.type != StatementType::SELECT_STATEMENT) {
			return 0;
		}
		auto &info = *copy_stmt.Cast<CopyStatement>().info;
		if (info.is_from || info.file_path != string(target) || info.file_path_expression || !info.select_statement ||
		    !info.table.empty() || !info.select_list.empty() || !info.options.empty()) {
			return 0;
		}
		const bool csv = StringUtil::CIEquals(format, "csv");
		bool format_named = false;
		for (auto &option : info.parsed_options) {
			auto &name = option.first;
			if (StringUtil::CIEquals(name, "format")) {
				auto &value = option.second;
				format_named = value && value->type == ExpressionType::COLUMN_REF &&
				               !value->Cast<ColumnRefExpression>().IsQualified() &&
				               StringUtil::CIEquals(value->Cast<ColumnRefExpression>().GetColumnName(), format);
			} else if (!(csv && StringUtil::CIEquals(name, "header")) && !StringUtil::CIEquals(name, "use_tmp_file")) {
				return 0;
			}
		}
		if (!format_named) {
			return 0;
		}
		auto &select = select_stmt.Cast<SelectStatement>();
		return info.select_statement->Equals(select.node.get()) ? 1 : 0;
	} catch (...) {
		return 0;
	}
}

// 1 when `wrapper_sql` is, by DuckDB's parser, exactly `SELECT * FROM
// (<query>) LIMIT <constant>` around the one statement `select_sql` holds:
// one plain star, the query as its only source, a constant limit and
// nothing else; else 0.
int duckgate_limit_wraps(const char *wrapper_sql, const char *select_sql) {
	try {
		Parser wrapper_parser;
		wrapper_parser.ParseQuery(string(wrapper_sql));
		Parser select_parser;
		select_parser.ParseQuery(string(select_sql));
		if (wrapper_parser.statements.size() != 1 || select_parser.statements.size() != 1) {
			return 0;
		}
		auto &wrapper_stmt = *wrapper_parser.statements[0];
		auto &select_stmt = *select_parser.statements[0];
		if (wrapper_stmt.type != StatementType::SELECT_STATEMENT ||
		    select_stmt.type != StatementType::SELECT_STATEMENT) {
			return 0;
		}
		auto &node = *wrapper_stmt.Cast<SelectStatement>().node;
		if (node.type != QueryNodeType::SELECT_NODE || !node.cte_map.map.empty()) {
			return 0;
		}
		auto &outer = node.Cast<SelectNode>();
		if (outer.where_clause || outer.having || outer.qualify || outer.sample || !outer.groups.group_expressions.empty() ||
		    !outer.groups.grouping_sets.empty() || outer.aggregate_handling != AggregateHandling::STANDARD_HANDLING ||
		    outer.select_list.size() != 1 || outer.select_list[0]->type != ExpressionType::STAR ||
		    !outer.from_table || outer.from_table->type != TableReferenceType::SUBQUERY || outer.from_table->sample ||
		    outer.modifiers.size() != 1 || outer.modifiers[0]->type != ResultModifierType::LIMIT_MODIFIER) {
			return 0;
		}
		auto &star = outer.select_list[0]->Cast<StarExpression>();
		if (!star.relation_name.empty() || !star.exclude_list.empty() || !star.replace_list.empty() ||
		    !star.rename_list.empty() || star.expr || star.columns) {
			return 0;
		}
		auto &limit = outer.modifiers[0]->Cast<LimitModifier>();
		if (!limit.limit || limit.offset || limit.limit->type != ExpressionType::VALUE_CONSTANT) {
			return 0;
		}
		auto &source = outer.from_table->Cast<SubqueryRef>();
		if (!source.column_name_alias.empty()) {
			return 0;
		}
		auto &select = select_stmt.Cast<SelectStatement>();
		return source.subquery->node->Equals(select.node.get()) ? 1 : 0;
	} catch (...) {
		return 0;
	}
}

} // extern "C"
