// Every S3 path DuckDB opens, lists or globs passes one check first: no `?`.
//
// httpfs reads per-URL overrides from an S3 path's query string
// (`s3://b/k?s3_endpoint=host&s3_use_ssl=false` sends the signed request,
// session token included, to `host`) unless `s3_url_compatibility_mode` is
// on, and that mode also makes glob characters literal: `s3://b/*/*.parquet`
// and hive partitions read nothing. The guard refuses `?` in every path a
// client writes, but a glob's results are the bucket's own key names, which
// httpfs parses again as URLs (S3GlobResult joins prefix, bucket and key and
// reopens it), and lake and Iceberg metadata name files too. So the gateway
// turns the compatibility mode off and puts this file system in front of
// httpfs's: every path it is asked to open, test, list or glob, and every
// path a glob or listing returns, must hold no `?` (the query string's only
// delimiter in httpfs's parser; `#` and `%` are encoded, never decoded).
// A key that holds one fails the query that met it, naming the key.
//
// httpfs's S3 file system is taken out of DuckDB's registry and owned by
// this one, which takes its place for the prefixes it handles. Handles are
// httpfs's own: reads and writes go to the file system that opened them.

#include "shims.h"
#include "duckdb.hpp"
#include "duckdb/common/exception.hpp"
#include "duckdb/common/file_system.hpp"
#include "duckdb/common/file_opener.hpp"
#include "duckdb/common/open_file_info.hpp"
#include "duckdb/common/multi_file/multi_file_list.hpp"
#include "duckdb/main/capi/capi_internal.hpp"

using namespace duckdb;

namespace {

class GuardedS3FileSystem : public FileSystem {
public:
	explicit GuardedS3FileSystem(unique_ptr<FileSystem> owned_p) : owned(std::move(owned_p)), inner(*owned) {
	}

	static void Check(const string &path) {
		if (path.find('?') != string::npos) {
			throw PermissionException("the S3 path '%s' holds '?', which httpfs would read as URL parameters that "
			                          "redirect requests; the gateway refuses such paths and keys",
			                          path);
		}
	}

	unique_ptr<FileHandle> OpenFile(const string &path, FileOpenFlags flags,
	                                optional_ptr<FileOpener> opener) override {
		Check(path);
		return inner.OpenFile(path, flags, opener);
	}
	bool FileExists(const string &filename, optional_ptr<FileOpener> opener) override {
		Check(filename);
		return inner.FileExists(filename, opener);
	}
	bool DirectoryExists(const string &directory, optional_ptr<FileOpener> opener) override {
		Check(directory);
		return inner.DirectoryExists(directory, opener);
	}
	bool IsPipe(const string &filename, optional_ptr<FileOpener> opener) override {
		Check(filename);
		return inner.IsPipe(filename, opener);
	}
	bool ListFiles(const string &directory, const std::function<void(const string &, bool)> &callback,
	               FileOpener *opener) override {
		Check(directory);
		return inner.ListFiles(
		    directory,
		    [&](const string &path, bool is_dir) {
			    Check(path);
			    callback(path, is_dir);
		    },
		    opener);
	}
	void CreateDirectory(const string &directory, optional_ptr<FileOpener> opener) override {
		Check(directory);
		inner.CreateDirectory(directory, opener);
	}
	void RemoveDirectory(const string &directory, optional_ptr<FileOpener> opener) override {
		Check(directory);
		inner.RemoveDirectory(directory, opener);
	}
	void MoveFile(const string &source, const string &target, optional_ptr<FileOpener> opener) override {
		Check(source);
		Check(target);
		inner.MoveFile(source, target, opener);
	}
	void RemoveFile(const string &filename, optional_ptr<FileOpener> opener) override {
		Check(filename);
		inner.RemoveFile(filename, opener);
	}
	bool TryRemoveFile(const string &filename, optional_ptr<FileOpener> opener) override {
		Check(filename);
		return inner.TryRemoveFile(filename, opener);
	}
	void RemoveFiles(const vector<string> &filenames, optional_ptr<FileOpener> opener) override {
		for (auto &f : filenames) {
			Check(f);
		}
		inner.RemoveFiles(filenames, opener);
	}
	bool CanHandleFile(const string &fpath) override {
		return inner.CanHandleFile(fpath);
	}
	bool CanSeek() override {
		return inner.CanSeek();
	}
	bool IsManuallySet() override {
		return false;
	}
	std::string GetName() const override {
		return "DuckgateS3PathGuard";
	}

protected:
	unique_ptr<FileHandle> OpenFileExtended(const OpenFileInfo &file, FileOpenFlags flags,
	                                        optional_ptr<FileOpener> opener) override {
		Check(file.path);
		// The public overload takes the extended route where httpfs has one
		// (a glob's listing already knows sizes and ETags).
		return inner.OpenFile(file, flags, opener);
	}
	bool SupportsOpenFileExtended() const override {
		return true;
	}
	// A glob is httpfs's listing, checked whole before any of it is used
	// (a lazy listing would hand out files before the later keys are seen).
	unique_ptr<MultiFileList> GlobFilesExtended(const string &path, const FileGlobInput &input,
	                                            optional_ptr<FileOpener> opener) override {
		Check(path);
		auto found = inner.Glob(path, input, opener)->GetAllFiles();
		for (auto &file : found) {
			Check(file.path);
		}
		return make_uniq<SimpleMultiFileList>(std::move(found));
	}
	bool SupportsGlobExtended() const override {
		return true;
	}

private:
	unique_ptr<FileSystem> owned;
	FileSystem &inner;
};

} // namespace

extern "C" {

// Puts the path check in front of httpfs's S3 file system on `database` (a
// `duckdb_database`); call after LOAD httpfs, before any client query.
// 0 on success, 1 when no file system handles `s3://` paths.
int duckgate_guard_s3_paths(void *database) {
	try {
		auto wrapper = static_cast<DatabaseWrapper *>(database);
		if (!wrapper || !wrapper->database) {
			return 2;
		}
		auto &instance = *wrapper->database->instance;
		auto &fs = instance.GetFileSystem();
		// httpfs's S3 file system (its name in DuckDB 1.5.5's httpfs), taken
		// out of the registry and owned by the guard in front of it.
		auto s3 = fs.ExtractSubSystem("S3FileSystem");
		if (!s3 || !s3->CanHandleFile("s3://bucket/key")) {
			return 1;
		}
		fs.RegisterSubSystem(make_uniq<GuardedS3FileSystem>(std::move(s3)));
		return 0;
	} catch (...) {
		return 2;
	}
}

} // extern "C"
