// Where DuckDB's error about a client's SQL points, in the client's own text.
//
// DuckDB places an error at a byte offset into the text its parser read: the
// client's text with Unicode blanks (no-break space, ideographic space, ...)
// replaced by ASCII spaces (Parser::StripUnicodeSpaces). The offset is the
// `position` of the error's extra info where the guard's shims catch the
// exception, and the caret of the `LINE n:` excerpt DuckDB appends
// (QueryErrorContext::Format) to the errors that reach its C API. These
// functions take the offset back into the client's text and render DuckDB's
// excerpt over that text, or find the offset an excerpt was rendered for. Both
// use DuckDB's own functions; neither reads SQL itself.

#include "shims.h"
#include "shim_support.hpp"
#include "duckdb.hpp"
#include "duckdb/parser/parser.hpp"
#include "duckdb/parser/query_error_context.hpp"

#include <cstdlib>
#include <cstring>

namespace {

using duckdb::idx_t;
using duckdb::optional_idx;
using duckdb::Parser;
using duckdb::QueryErrorContext;
using std::string;

// The text DuckDB's parser reads for `sql`.
string ReadAsDuckDB(const string &sql) {
	string read;
	if (Parser::StripUnicodeSpaces(sql, read)) {
		return read;
	}
	return sql;
}

// Bytes of the UTF-8 sequence that starts with `lead`.
idx_t SequenceBytes(unsigned char lead) {
	if (lead >= 0xF0) {
		return 4;
	}
	if (lead >= 0xE0) {
		return 3;
	}
	if (lead >= 0xC0) {
		return 2;
	}
	return 1;
}

// The offset in `sql` of byte `position` of `read` (DuckDB's reading of
// `sql`, where each blank it replaced is one space), or an invalid index.
// The texts agree byte for byte but where a blank was replaced: there `read`
// holds a space and `sql` a sequence of two or three bytes that starts with a
// byte above 0x7F, so the walk never takes one for the other.
optional_idx InClientText(const string &sql, const string &read, idx_t position) {
	idx_t i = 0;
	idx_t j = 0;
	while (j < position) {
		if (i >= sql.size() || j >= read.size()) {
			return optional_idx();
		}
		if (sql[i] == read[j]) {
			i++;
			j++;
		} else if (read[j] == ' ') {
			i += SequenceBytes(static_cast<unsigned char>(sql[i]));
			j++;
		} else {
			return optional_idx();
		}
	}
	return i > sql.size() ? optional_idx() : optional_idx(i);
}

// DuckDB's excerpt of `text` at `offset`, without the blank line Format puts
// before it; empty where DuckDB renders none.
string Excerpt(const string &text, idx_t offset) {
	auto rendered = QueryErrorContext::Format(text, "", optional_idx(offset));
	if (rendered.rfind("\n\n", 0) == 0) {
		return rendered.substr(2);
	}
	return rendered;
}

} // namespace

extern "C" {

// `position` (a byte offset into DuckDB's reading of `sql`) as a byte offset
// into `sql` itself, in `*offset`, and DuckDB's excerpt of `sql` there in
// `*excerpt` (malloc'd; NULL where DuckDB renders none). 1 on success, 0 when
// the position is not in the text. Never throws.
int duckgate_error_place(const char *sql, uint64_t position, uint64_t *offset, char **excerpt) {
	*excerpt = nullptr;
	try {
		string text(sql);
		auto read = ReadAsDuckDB(text);
		if (position > read.size()) {
			return 0;
		}
		auto at = InClientText(text, read, position);
		if (!at.IsValid()) {
			return 0;
		}
		*offset = at.GetIndex();
		auto rendered = Excerpt(text, at.GetIndex());
		if (!rendered.empty()) {
			*excerpt = duckgate_shim::CopyOut(rendered);
		}
		return 1;
	} catch (...) {
		return 0;
	}
}

// The byte offset into DuckDB's reading of `sql` for which DuckDB renders
// exactly `excerpt` (`LINE n: ...` and its caret line, as DuckDB appends it to
// an error), in `*position`. 1 when found, 0 otherwise. Lines longer than
// `max_line` bytes are not searched. Never throws.
//
// The candidates are the bytes of line n where the excerpt's text appears
// (DuckDB shows at most about 120 columns of the line, cut with "..."); the
// answer is the one DuckDB's own Format renders identically. Offsets inside a
// character render like the character's end, so the last of a run of matches
// is where the character starts.
int duckgate_excerpt_position(const char *sql, const char *excerpt, uint64_t max_line, uint64_t *position) {
	try {
		auto read = ReadAsDuckDB(string(sql));
		string wanted(excerpt);
		// "LINE <n>: <shown>\n<spaces>^"
		if (wanted.rfind("LINE ", 0) != 0) {
			return 0;
		}
		idx_t p = 5;
		idx_t line = 0;
		while (p < wanted.size() && wanted[p] >= '0' && wanted[p] <= '9') {
			line = line * 10 + idx_t(wanted[p] - '0');
			p++;
			if (line > read.size() + 1) {
				return 0;
			}
		}
		if (line == 0 || wanted.compare(p, 2, ": ") != 0) {
			return 0;
		}
		auto shown_end = wanted.find('\n', p + 2);
		if (shown_end == string::npos) {
			return 0;
		}
		string shown = wanted.substr(p + 2, shown_end - (p + 2));
		// Line `line` of the text, counted as Format counts.
		idx_t start = 0;
		idx_t current = 1;
		for (idx_t i = 0; i < read.size() && current < line; i++) {
			bool newline = read[i] == '\n' || (read[i] == '\r' && (i + 1 >= read.size() || read[i + 1] != '\n'));
			if (newline) {
				current++;
				start = i + 1;
			}
		}
		if (current != line) {
			return 0;
		}
		idx_t end = start;
		while (end < read.size() && read[end] != '\n' && read[end] != '\r') {
			end++;
		}
		if (end - start > max_line) {
			return 0;
		}
		const string dots = "...";
		// Where the shown text starts in the line: the line's start, or
		// (cut at the beginning) wherever its text without the dots appears.
		std::vector<std::pair<idx_t, idx_t>> spans;
		spans.emplace_back(start, shown.size());
		string inner = shown;
		if (inner.size() >= 3 && inner.compare(0, 3, dots) == 0) {
			inner = inner.substr(3);
		}
		if (inner.size() >= 3 && inner.compare(inner.size() - 3, 3, dots) == 0) {
			inner = inner.substr(0, inner.size() - 3);
		}
		if (!inner.empty()) {
			auto line_text = read.substr(start, end - start);
			for (auto at = line_text.find(inner); at != string::npos; at = line_text.find(inner, at + 1)) {
				spans.emplace_back(start + at, inner.size());
			}
		}
		for (auto &span : spans) {
			bool matched = false;
			idx_t last = 0;
			for (idx_t b = span.first; b <= end && b <= span.first + span.second; b++) {
				if (Excerpt(read, b) == wanted) {
					matched = true;
					last = b;
				} else if (matched) {
					break;
				}
			}
			if (matched) {
				*position = last;
				return 1;
			}
		}
		return 0;
	} catch (...) {
		return 0;
	}
}

void duckgate_errors_free(char *text) {
	duckgate_shim::FreeText(text);
}

} // extern "C"
