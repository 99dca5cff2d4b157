#pragma once
/// One running language server: its process, the JSON-RPC exchange over its pipes (a reader thread
/// matches responses to waiting requests and answers the server's own requests), the documents
/// it has open, and what it reports about its progress.

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rpc.hpp"
#include "servers.hpp"

namespace lsp {

/// A request that failed: the server's error message, a timeout, or the server's death.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Session {
 public:
  using clock = std::chrono::steady_clock;

  /// Starts `argv` with `env` in `root` and initializes it (bounded by `deadline`). `indexes`: the
  /// server will run a background index (clangd given a compile database with entries).
  Session(const Server& server, std::vector<std::string> argv, std::vector<std::string> env, const std::string& root,
          bool indexes, clock::time_point deadline);
  ~Session();
  Session(const Session&) = delete;

  /// It exited, or it is hung (two requests in a row met silence): either way, to be replaced.
  bool dead() const;
  /// Sends a request and waits for its result until `deadline` (then cancels it).
  json request(const std::string& method, json params, clock::time_point deadline);
  void notify(const std::string& method, json params);

  /// Opens `path` in the server, or sends its new text when it changed on disk since. The file is
  /// read here; a file that cannot be read is closed in the server and the error thrown.
  void sync(const std::string& path);
  /// sync() for every open document.
  void sync_open();
  /// Opens every file of the project that changed on disk since the server started (written by a
  /// shell or an editor, not through sync()): the server's index still holds its old text, and a
  /// reference or a rename would miss what it holds now. Returns the files opened for that, or
  /// none when more changed than can be held open: the server should then start again.
  std::optional<std::vector<std::string>> sync_changed();
  /// Waits until the server has built `path` (its diagnostics for the current version, where the
  /// server publishes them) and, the first time only, until no progress (background indexing) is
  /// running and, for a server that indexes, its index has run; at most until `deadline`. False
  /// when the index has not run or progress is still running.
  bool wait_ready(const std::string& path, clock::time_point deadline);

 private:
  void read_loop();
  void send(const json& message);
  /// Closes the server's input, waits `grace_ms` for it to exit, kills it, joins the reader.
  void stop(int grace_ms);
  void answer(const json& request);
  void close_document(const std::string& path);

  Server server_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::thread reader_;
  std::mutex write_mu_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool dead_ = false;
  bool hung_ = false;
  unsigned long heard_ = 0;  ///< messages read from the server
  int silent_ = 0;           ///< requests in a row that timed out with no word from the server
  long next_id_ = 1;
  std::map<long, std::optional<json>> waiting_;  ///< id → the response once it came
  std::set<std::string> progress_;              ///< tokens of running work-done progress
  const bool indexes_;                           ///< a background index will run
  bool progressed_ = false;                      ///< some progress has begun
  std::map<std::string, long> built_;            ///< uri → version of its last diagnostics
  bool waited_index_ = false;

  struct Stamp {
    struct timespec mtime {};
    off_t size = 0;
    bool operator==(const Stamp& o) const {
      return size == o.size && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec;
    }
    static Stamp of(const struct stat& st) { return {st.st_mtim, st.st_size}; }
  };
  /// The project's files this server reads, as they are now (a bounded walk of root_).
  std::map<std::string, Stamp> scan() const;
  std::string root_;
  std::map<std::string, Stamp> started_;  ///< scan() when the server started

  struct Document {
    long version = 0;
    Stamp stamp;  ///< the file as it was last sent
    unsigned long used = 0;
  };
  std::mutex docs_mu_;
  std::map<std::string, Document> docs_;
  unsigned long uses_ = 0;
};

}  // namespace lsp
