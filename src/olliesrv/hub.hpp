#pragma once
/// What sessions and agents share (one per olliesrv): the event bus, the store, the HTTP engine
/// of the backends, a pool for the few blocking calls (files, model metadata, saves), one for
/// the profiles' `!` entries, the configuration, and the executors the engine runs on.

#include <asio/any_io_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/thread_pool.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/config.hpp"
#include "backend/http.hpp"
#include "bypass.hpp"
#include "caches.hpp"
#include "eventfd.hpp"
#include "event.hpp"
#include "lib9p/dirs.hpp"
#include "store.hpp"

namespace ollie {

class Session;

struct Hub {
  /// `contexts`: the I/O threads' io_contexts, where the engine runs and the HTTP transfers with it.
  Hub(Bus& b, std::string data_root, std::string config_root, std::string toolsrv,
      const std::vector<asio::io_context*>& contexts)
      : bus(b), store(data_root + "/sessions"), http(contexts), config_root(std::move(config_root)),
        data_root(data_root), toolsrv(std::move(toolsrv)), bypass(*this, data_root) {
    for (auto* io : contexts) executors.push_back(io->get_executor());
  }

  Bus& bus;
  Store store;
  backend::HttpEngine http;  ///< a loop per I/O thread: shut down once they have ended
  asio::thread_pool blocking{2};  ///< blocking calls only, never 9P or the engine
  /// Readable once olliesrv stops (stop_all): a `!` prompt entry still running ends with it. Kept
  /// until the pool below has joined.
  EventFd stop_fd;
  /// The profiles' `!` entries (§7.5.1), up to 30 s each: apart from `blocking`, where agent/new,
  /// the saves and the stop run, so that two slow entries hold none of them.
  asio::thread_pool commands{2};
  /// The providers' metadata (model lists, context windows), each ask up to a fetch's 60 s:
  /// apart from `blocking`, so that a provider whose list stalls, asked for many models, holds
  /// no save, agent/new or session/new of any session.
  asio::thread_pool asks{2};
  Caches caches;                  ///< model lists, profiles, tool catalog: root `ctl invalidate` drops them
  std::string config_root;        ///< $XDG_CONFIG_HOME/ollie
  std::string data_root;          ///< $XDG_DATA_HOME/ollie: sessions/, the bypass audit
  std::string toolsrv;            ///< the toolsrv executable
  std::string addr;               ///< OLLIE_ADDR for tools: olliesrv's first Unix address
  /// A remote session's forwarded socket (§6.11): olliesrv listens on `path` for session `sid`
  /// alone (idempotent), until unlisten_forward(sid). Set by Olliesrv::start.
  std::function<p9::Status(const std::string& sid, const std::string& path)> listen_forward;
  std::function<void(const std::string& sid)> unlisten_forward;
  p9::Env env = p9::process_env();
  /// Seconds of the retry table (§8.2) are this long: shortened by tests only.
  std::chrono::milliseconds retry_unit{1000};
  std::chrono::milliseconds toolsrv_idle{30000};  ///< Options::toolsrv_idle
  std::atomic<bool> stopping{false};
  /// `generate` and `complete` requests under way, by principal: each holds a connection to a
  /// provider, so one principal's are bounded (generate.cpp).
  std::mutex asking_mu;
  std::map<std::string, int> asking;
  Bypass bypass;  ///< the bypass broker and policies (§6.9.2), after what it uses

  /// backends.conf as last read (root `ctl invalidate` re-reads it).
  backend::BackendsConf conf() const {
    std::lock_guard lock(mu);
    return conf_;
  }
  void reload_conf();

  /// The executor of the next session or agent, round robin over the I/O threads.
  asio::any_io_executor next_executor() { return executors[next_++ % executors.size()]; }

  // ---- sessions by id, found by name or id ----
  std::shared_ptr<Session> find(const std::string& name_or_id) const;
  std::vector<std::shared_ptr<Session>> sessions() const;  ///< sorted by name
  /// Adds a session unless its name is taken (the error is `session already exists: <n>`).
  p9::Status add(std::shared_ptr<Session> s);
  void remove(const std::string& id);
  /// Renames under the registry's lock: `session already exists: <n>` on a clash.
  p9::Status rename(const std::shared_ptr<Session>& s, const std::string& name);

 private:
  mutable std::mutex mu;
  backend::BackendsConf conf_;
  std::map<std::string, std::shared_ptr<Session>> by_id_, by_name_;
  std::vector<asio::any_io_executor> executors;
  std::atomic<std::size_t> next_{0};
};

}  // namespace ollie
