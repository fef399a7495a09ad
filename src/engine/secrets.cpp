// Installs secrets (S3 keys, a PostgreSQL catalog's password) through
// DuckDB's secret manager, without SQL text.
//
// `CREATE SECRET ... KEY_ID '...', SECRET '...', SESSION_TOKEN '...'` puts the
// credentials into a statement's text, and DuckDB's query log, its profiler
// or any future hook that records statements would keep them. Here the
// values go from the rotator's memory straight into the `CreateSecretInput`
// that DuckDB's own CREATE SECRET would build, and the secret manager calls
// httpfs's `config` provider with it: the same secret, no text.
//
// After each install the shim checks that DuckDB's logging is still off (the
// lockdown keeps it off; a client that turned it on could read what the
// secret manager and httpfs log).

#include "shims.h"
#include "shim_support.hpp"
#include "duckdb.hpp"
#include "duckdb/main/client_context.hpp"
#include "duckdb/main/connection.hpp"
#include "duckdb/main/secret/secret.hpp"
#include "duckdb/main/secret/secret_manager.hpp"
#include "duckdb/common/error_data.hpp"

#include <cstdlib>
#include <cstring>

using namespace duckdb;

namespace {

char *Error(const string &text) {
	return duckgate_shim::CopyOut(text);
}

} // namespace

extern "C" {

// Creates or replaces the temporary secret `name` of type `type` (`s3`,
// `postgres`: the extension that defines it must be loaded) with the `config`
// provider on `connection`'s database. `keys`/`values` are `n` option pairs
// (VARCHAR, except `use_ssl`: "true"/"false"), `scope` holds `n_scope`
// prefixes. Returns NULL on success, else a malloc'd text naming the error's
// class only (DuckDB's messages may quote option values). Never throws.
char *duckgate_install_secret(void *connection, const char *type, const char *name, const char *const *keys,
                              const char *const *values, size_t n, const char *const *scope, size_t n_scope) {
	try {
		auto conn = reinterpret_cast<Connection *>(connection);
		auto &context = *conn->context;
		CreateSecretInput input;
		input.type = type;
		input.provider = "config";
		input.storage_type = "memory";
		input.name = name;
		input.on_conflict = OnCreateConflict::REPLACE_ON_CONFLICT;
		input.persist_type = SecretPersistType::TEMPORARY;
		for (size_t i = 0; i < n_scope; i++) {
			input.scope.push_back(scope[i]);
		}
		for (size_t i = 0; i < n; i++) {
			string key = keys[i];
			if (key == "use_ssl") {
				input.options[key] = Value::BOOLEAN(strcmp(values[i], "true") == 0);
			} else {
				input.options[key] = Value(string(values[i]));
			}
		}
		context.RunFunctionInTransaction(
		    [&]() { SecretManager::Get(context).CreateSecret(context, input); });
	} catch (std::exception &ex) {
		ErrorData error(ex);
		return Error(Exception::ExceptionTypeToString(error.Type()));
	} catch (...) {
		return Error("Unknown");
	}
	return nullptr;
}

// NULL when DuckDB's logging is off (no log storage, no query log file), else
// a malloc'd text naming what is on. Never throws. The two settings are read
// by name, as `duckdb_settings()` reports them to this connection: a scan of
// every setting was half of a rotation's CPU (1.4 of 3 ms).
char *duckgate_logging_off(void *connection) {
	try {
		auto conn = reinterpret_cast<Connection *>(connection);
		auto &context = *conn->context;
		Value logging, path;
		if (!context.TryGetCurrentSetting("enable_logging", logging) ||
		    !context.TryGetCurrentSetting("log_query_path", path) || logging.IsNull()) {
			return Error("the logging settings could not be read");
		}
		// What the scan's `value NOT IN ('0', 'false')` and `value <> ''`
		// meant, on the settings' own types (a NULL path: none).
		if (logging.DefaultCastAs(LogicalType::BOOLEAN).GetValue<bool>()) {
			return Error("enable_logging is on");
		}
		if (!path.IsNull() && !path.ToString().empty()) {
			return Error("log_query_path is on");
		}
	} catch (...) {
		return Error("the logging settings could not be read");
	}
	return nullptr;
}

void duckgate_secrets_free(char *text) {
	duckgate_shim::FreeText(text);
}

} // extern "C"
