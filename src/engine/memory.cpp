// A ceiling on the memory DuckDB allocates beyond its buffer pool.
//
// DuckDB's `memory_limit` bounds its buffer pool (tables, hash tables,
// sorts), not the vectors a query computes: a vector's strings and a list's
// children are allocated through the database's allocator (or DuckDB's
// default one) with no limit. `SELECT length(repeat('x', 1500000000))`
// allocated 1.5 GB for one value under a 200 MB `memory_limit`, and the same
// function over `range(64)` asks for 64 of them in one vector: one request
// could take the process past its memory and have it killed.
//
// The database's allocator (set in its configuration before it opens) and
// DuckDB's default allocator (replaced before any database opens) become
// one that calls DuckDB's own functions (jemalloc in the official build) and
// counts the bytes held through either. An allocation that would take the
// count past the ceiling returns NULL, which DuckDB turns into its own
// `OutOfMemoryException` ("Failed to allocate block of N bytes"): the query
// that asked fails with DuckDB's out-of-memory error, and nothing else does.
// DuckDB hands every free and reallocation its size, so the count is exact.
// The buffer pool's blocks are counted too (they come from the same
// allocator), so the gateway sets the ceiling to the pool's limit plus what
// may be held beyond it.

#include "shims.h"
#include "duckdb.hpp"
#include "duckdb/common/allocator.hpp"
#include "duckdb/main/capi/capi_internal.hpp"
#include "duckdb/main/config.hpp"
#include "duckdb/main/database.hpp"
#include "duckdb/storage/buffer_manager.hpp"

#include <atomic>
#include <limits>
#include <mutex>

using namespace duckdb;

namespace {

std::atomic<int64_t> held {0};
std::atomic<int64_t> ceiling {std::numeric_limits<int64_t>::max()};
std::atomic<uint64_t> refused {0};

// Reserves `size` bytes of the ceiling; false (nothing reserved) past it.
bool Reserve(idx_t size) {
	auto amount = static_cast<int64_t>(size);
	auto before = held.fetch_add(amount, std::memory_order_relaxed);
	if (before + amount > ceiling.load(std::memory_order_relaxed)) {
		held.fetch_sub(amount, std::memory_order_relaxed);
		refused.fetch_add(1, std::memory_order_relaxed);
		return false;
	}
	return true;
}

void Release(idx_t size) {
	held.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
}

data_ptr_t CountedAllocate(PrivateAllocatorData *data, idx_t size) {
	if (!Reserve(size)) {
		return nullptr;
	}
	auto result = Allocator::DefaultAllocate(data, size);
	if (!result) {
		Release(size);
	}
	return result;
}

void CountedFree(PrivateAllocatorData *data, data_ptr_t pointer, idx_t size) {
	Allocator::DefaultFree(data, pointer, size);
	Release(size);
}

data_ptr_t CountedReallocate(PrivateAllocatorData *data, data_ptr_t pointer, idx_t old_size, idx_t size) {
	if (size > old_size && !Reserve(size - old_size)) {
		// The old block stays valid and counted, as realloc leaves it.
		return nullptr;
	}
	auto result = Allocator::DefaultReallocate(data, pointer, old_size, size);
	if (!result) {
		if (size > old_size) {
			Release(size - old_size);
		}
	} else if (size < old_size) {
		Release(old_size - size);
	}
	return result;
}

} // namespace

extern "C" {

// Makes DuckDB's default allocator the counting one, and gives the database
// that opens with `config` (a `duckdb_config`, which is DuckDB's `DBConfig`)
// the counting allocator too. Call it before that database opens (a
// database takes both allocators when it opens). The first call replaces
// the default allocator, and a concurrent one waits until it has; the one
// it replaces is kept alive (anything allocated before keeps a reference to
// it). 0 on success.
int duckgate_count_memory(void *config) {
	static std::once_flag once;
	static shared_ptr<Allocator> previous;
	try {
		std::call_once(once, [] {
			auto counted = make_shared_ptr<Allocator>(CountedAllocate, CountedFree, CountedReallocate, nullptr);
			auto &current = Allocator::DefaultAllocatorReference();
			previous = current;
			current = std::move(counted);
		});
		static_cast<DBConfig *>(config)->allocator =
		    make_uniq<Allocator>(CountedAllocate, CountedFree, CountedReallocate, nullptr);
		return 0;
	} catch (...) {
		return 1;
	}
}

// The ceiling in bytes (0: none).
void duckgate_set_memory_ceiling(uint64_t bytes) {
	auto limit = std::numeric_limits<int64_t>::max();
	if (bytes != 0 && bytes < static_cast<uint64_t>(limit)) {
		limit = static_cast<int64_t>(bytes);
	}
	ceiling.store(limit, std::memory_order_relaxed);
}

// Bytes held now, the ceiling (0: none), and allocations refused so far.
void duckgate_memory_usage(uint64_t *bytes, uint64_t *limit, uint64_t *refusals) {
	auto now = held.load(std::memory_order_relaxed);
	*bytes = now < 0 ? 0 : static_cast<uint64_t>(now);
	auto most = ceiling.load(std::memory_order_relaxed);
	*limit = most == std::numeric_limits<int64_t>::max() ? 0 : static_cast<uint64_t>(most);
	*refusals = refused.load(std::memory_order_relaxed);
}

// The memory DuckDB sees on this machine (its cgroup's limit if lower) and
// its buffer pool's limit, in bytes. 0 on success.
int duckgate_memory_budget(void *database, uint64_t *available, uint64_t *buffer_pool) {
	try {
		auto wrapper = static_cast<DatabaseWrapper *>(database);
		if (!wrapper || !wrapper->database) {
			return 1;
		}
		auto &instance = *wrapper->database->instance;
		*available = DBConfig::GetSystemAvailableMemory(FileSystem::GetFileSystem(instance));
		*buffer_pool = BufferManager::GetBufferManager(instance).GetMaxMemory();
		return 0;
	} catch (...) {
		return 2;
	}
}

} // extern "C"
