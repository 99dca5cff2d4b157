#pragma once
/// Path locks (spec §6.7): read takes none; write takes a shared hold on the global lock and an
/// exclusive lock on its path; global excludes everything. Waiters are served in arrival order
/// among those they conflict with, so neither kind starves; unrelated paths never wait on each
/// other. Acquisition is by callback, cancellable; no thread waits.

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "toolsrv/meta.hpp"

namespace toolsrv {

/// What a call must lock.
struct LockRequest {
  enum class Kind { none, write, global };
  Kind kind = Kind::global;
  std::string path;  ///< for write: absolute, cleaned, symlinks resolved

  /// The request of a call (§6.7): read → none; write with a string top-level `path` → that path
  /// made absolute against `cwd`, cleaned and resolved; write without one, or global → global.
  static LockRequest for_call(Scope scope, const nlohmann::json& args, const std::string& cwd);
};

class LockTable;

/// A granted lock; released when destroyed (or on release()).
class LockHold {
 public:
  LockHold() = default;
  LockHold(LockHold&&) noexcept = default;
  LockHold& operator=(LockHold&& o) noexcept;
  LockHold(const LockHold&) = delete;
  LockHold& operator=(const LockHold&) = delete;
  ~LockHold() { release(); }
  /// Releases now (idempotent); may grant waiters, whose callbacks run on this thread.
  void release();

 private:
  friend class LockTable;
  LockHold(std::weak_ptr<LockTable> table, std::uint64_t id) : table_(std::move(table)), id_(id) {}
  std::weak_ptr<LockTable> table_;
  std::uint64_t id_ = 0;
};

class LockTable : public std::enable_shared_from_this<LockTable> {
 public:
  /// Use create(): holds refer to the table weakly.
  static std::shared_ptr<LockTable> create();

  /// Asks for a lock. `granted` is called exactly once with the hold, unless cancelled first: at
  /// once on this thread when nothing conflicts (always for Kind::none), else on the thread that
  /// releases the last conflicting hold. Returns a ticket for cancel().
  std::uint64_t acquire(LockRequest request, std::function<void(LockHold)> granted);

  /// Withdraws a waiting request (flush). True if it was still waiting; false if it was already
  /// granted (then the hold is the caller's to release).
  bool cancel(std::uint64_t ticket);

  /// Number of requests waiting (for tests and stat).
  std::size_t waiting() const;

 private:
  friend class LockHold;
  LockTable() = default;
  struct Entry {
    std::uint64_t id;
    LockRequest req;
    std::function<void(LockHold)> granted;
  };
  static bool conflicts(const LockRequest& a, const LockRequest& b);
  void release(std::uint64_t id);
  std::vector<std::pair<std::uint64_t, std::function<void(LockHold)>>> grant_locked();

  mutable std::mutex mu_;
  std::uint64_t next_id_ = 1;
  std::list<Entry> held_;
  std::list<Entry> waiting_;
};

}  // namespace toolsrv
