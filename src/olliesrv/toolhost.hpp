#pragma once
/// olliesrv's client of one session's toolsrv (spec §6.1): started at the session's first need,
/// never before (a restored or idle session holds no toolsrv process); a fresh 32-byte secret
/// on descriptor 3 at every start; attached through Tauth; synced at every start with what the
/// session wants (cwd, env, every agent's agentcwd and loaded tools); every call a co_await
/// whose cancellation flushes it (killing the tool's process group). When toolsrv dies the calls
/// in flight end `error: tool server lost: <reason>` and the next need starts a new one, after
/// killing any leftover; a start that fails is `tool server unavailable: <reason>` and is
/// tried again at the next need.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lib9p/async_client.hpp"
#include "lib9p/result.hpp"
#include "virtfs/gate.hpp"

namespace ollie {

/// One entry of toolsrv's `tools` reply (§6.4).
struct ToolInfo {
  std::string name, description, prompt;
  std::string parameters = R"({"type":"object","properties":{}})";  ///< JSON Schema text
  std::string scope = "global", tier = "hot", output_format;
  int timeout = 30;
  std::string error;  ///< catalog only: why the tool is invalid ("" = valid)
};

/// One tool call as the engine makes it (§6.5.1); dispatch flags already removed from args.
struct ToolCallRequest {
  std::string tool, agent, auth;
  std::string args;                ///< the JSON object text
  std::optional<int> timeout;      ///< seconds; nullopt = the tool's default
  bool bypass = false;             ///< ask the hostowner to run it unsandboxed (§6.9)
};

/// One path as toolsrv's `info` request `stat` reports it (§6.4): mtime and size are "-" when
/// the path does not exist.
struct FileStamp {
  bool exists = false;
  std::string mtime_ns = "-", size = "-";
  bool operator==(const FileStamp&) const = default;
};

/// A call's result as the model reads it (§8.3.4): `text` already converted, prefixed and cut.
struct ToolOutcome {
  std::string text;
  bool error = false;
  /// What the reply's headers say about the sandbox (§7.3.2, §7.3.3): the sha256 of a project
  /// override that was ignored ("" = none), and whether the call ran unconfined (`sandbox=none`).
  std::string override_ignored;
  bool unconfined = false;
};

class ToolHost : public std::enable_shared_from_this<ToolHost> {
 public:
  struct Config {
    std::string session_id;
    std::string cwd;          ///< the session cwd
    std::string toolsrv;      ///< the toolsrv executable (bin/toolsrv beside olliesrv)
    std::string config_root;  ///< toolsrv's -config ("" = its default)
    std::string remote;       ///< ssh destination: toolsrv runs there (§6.11, remote.hpp); "" = here
    /// A remote session's forwarded olliesrv socket: listens on the path for this session alone.
    std::function<p9::Status(const std::string& path)> listen_forward;
    /// The secret variables of backends.conf as olliesrv loaded it (backend::secret_variables):
    /// kept from toolsrv's environment even when the file cannot be read again at a start (§6.1).
    std::function<std::vector<std::string>()> secret_vars;
    /// A tool of an agent's that a start's sync could not load again (`unknown tool: t`...): it is
    /// no longer wanted; the agent is told (§7.5: an `info` warning, not a failure).
    std::function<void(const std::string& agent, const std::string& tool, const std::string& why)> dropped;
    /// Whether the session has work its toolsrv holds (a turn, a background process). A toolsrv
    /// not needed for `idle` while the session has none is stopped, and starts again, synced,
    /// at the next need: an idle session holds no toolsrv process. Unset: it runs on.
    std::function<bool()> busy;
    std::chrono::milliseconds idle{0};
  };
  /// `ex`: where the client and its waits run (a strand of olliesrv's pool).
  static std::shared_ptr<ToolHost> make(asio::any_io_executor ex, Config cfg);

  /// Clients' streams of toolsrv (an agent's proc/<pid>/out and wait, each a toolsrv fid and at
  /// most one read waiting there) open at once: a quarter of the connection's requests in flight
  /// (p9::Mux::MAX_IN_FLIGHT) and of toolsrv's fids per connection, half of them the hostowner's
  /// and half the agents'. Those beyond wait in olliesrv: however many reads clients leave
  /// waiting, the engine's calls and the background processes' watchers keep their places, and
  /// no tool holding its agents' places keeps the hostowner from reading.
  const std::shared_ptr<virtfs::Gate> owner_streams = std::make_shared<virtfs::Gate>();
  const std::shared_ptr<virtfs::Gate> agent_streams = std::make_shared<virtfs::Gate>();
  static constexpr std::size_t max_streams = 128;  ///< of each
  ~ToolHost();

  // ---- what the session wants; pushed at once when toolsrv runs, else at its next start ----
  /// Session variables (`env K=V`; empty value unsets). Never starts toolsrv.
  void set_env(const std::string& key, const std::string& value);
  /// An agent's cwd override ("" clears it). Never starts toolsrv.
  void set_agent_cwd(const std::string& agent, const std::string& dir);
  /// The tools an agent should have loaded at every start (restore; a profile's autoLoad while no
  /// toolsrv could take it). Never starts toolsrv.
  void want_tools(const std::string& agent, std::vector<std::string> tools);
  /// The approved project sandbox overrides (`ctl sandboxok`, §7.3.3): (sha256, absolute dir)
  /// pairs, replacing the previous set. Never starts toolsrv.
  void set_sandbox_ok(std::vector<std::pair<std::string, std::string>> pairs);
  /// Runs `f` with the instance number after every start of toolsrv, and at once when one runs
  /// (the bypass broker follows each instance's bypass/pending). Never starts toolsrv.
  void on_start(std::function<void(std::uint64_t instance)> f);

  // ---- needs: each starts toolsrv when it is not running ----
  /// Starts (and syncs) toolsrv unless it runs. The error is the reason.
  asio::awaitable<p9::Status> ensure();
  /// `ctl cwd <dir>` on the running host (a new session's cwd goes with its start): toolsrv's error on a bad dir.
  asio::awaitable<p9::Status> set_cwd(std::string dir);
  /// Sends the running toolsrv everything a start sends (session `invalidate`, §3.2): the cwd and
  /// every agent's cwd resolved again (a directory removed and made anew), env, tools.
  asio::awaitable<p9::Status> resync();
  /// `ctl agentcwd` checked now (ctl cwd of an agent): toolsrv's error on a bad dir.
  asio::awaitable<p9::Status> check_agent_cwd(std::string agent, std::string dir);
  /// `ctl load <agent> <tools...>`: all or nothing; remembered for later starts once toolsrv
  /// took them. Refused, or no toolsrv to ask (`unreachable`), nothing changes.
  asio::awaitable<p9::Status> load(std::string agent, std::vector<std::string> tools);
  /// Whether a need's error says toolsrv could not be asked (`tool server unavailable: …`,
  /// `tool server lost: …`), not what it answered.
  static bool unreachable(const std::string& ename);
  /// `ctl unload`.
  asio::awaitable<p9::Status> unload(std::string agent, std::vector<std::string> tools);
  /// `ctl forget <agent>` (agent killed); forgets it for later starts too. Never starts toolsrv.
  asio::awaitable<void> forget(std::string agent);
  /// The agent's loaded tools (`tools <agent>`), sorted by name.
  asio::awaitable<p9::Result<std::vector<ToolInfo>>> tools(std::string agent);
  /// The version of what the session wants of toolsrv (loaded tools, env, cwds): a `tools`
  /// reply read under one version is the list under it.
  std::uint64_t wishes() const;
  /// The catalog (`tools *`), invalid tools included.
  asio::awaitable<p9::Result<std::vector<ToolInfo>>> catalog();
  /// `info` (agent "" = session scope): key → value.
  asio::awaitable<p9::Result<std::map<std::string, std::string>>> info(std::string agent);
  /// `info` request `stat <agent> <path>...` (§6.4): one stamp per path, in order; a relative
  /// path is taken against the agent's effective cwd.
  asio::awaitable<p9::Result<std::vector<FileStamp>>> stat(std::string agent, std::vector<std::string> paths);
  /// `info` request `resolve <agent> <path>...`: each path with `..` and symlinks resolved on the
  /// tool host, "" when it names no directory there; in order.
  asio::awaitable<p9::Result<std::vector<std::string>>> resolve(std::string agent, std::vector<std::string> paths);
  /// Whom a call's reply is for: the model (the result of §8.3.4) or a person at a terminal (a
  /// `!command`'s exec block, §3.4: the output as it came, the exit on a last line).
  enum class For { model, terminal };
  /// Runs one call through proc/new and converts the reply for `whom`. Never throws for a tool
  /// failure or a lost toolsrv (those are results); throws operation_aborted when the awaiting
  /// coroutine is cancelled, after flushing the request.
  asio::awaitable<ToolOutcome> call(ToolCallRequest req, For whom = For::model);

  /// A started background process (§6.10): its pid in toolsrv instance `instance`.
  struct Background {
    int pid = 0;
    std::uint64_t instance = 0;
  };
  /// proc/new.bg (§6.5.1): the error is toolsrv's (`bypass denied`, `start failed: …`) or
  /// `tool server unavailable: …`. Cancellation flushes the request, so nothing starts.
  asio::awaitable<p9::Result<Background>> start_background(ToolCallRequest req);
  /// Walks to `path` in toolsrv instance `instance` and opens it with `mode` (negative: walk
  /// only); for the files of a background pid. Never starts toolsrv and never reaches another
  /// instance, whose pids are other processes: `tool server lost` once that one is gone.
  asio::awaitable<p9::Result<p9::AsyncFid>> open(std::uint64_t instance, std::string path, int mode);

  /// A remote session's OLLIE_ADDR (§6.11): the remote end of the reverse forward of its last
  /// start, "" before the first one and for a local session.
  std::string forward_addr() const;
  /// The session cwd as toolsrv has it: a remote `~/…` expanded once a start has expanded it.
  std::string cwd() const;
  /// Whether a toolsrv process runs now.
  bool running() const;
  /// The number of the instance running now (as in Background), 0 when none does.
  std::uint64_t live_instance() const;
  /// Kills toolsrv for good (session kill, shutdown): a later need fails `session killed`, and a
  /// start under way is undone.
  void stop();
  /// Lets go of the last instance (its client posts to the I/O contexts as it closes): at the
  /// end of olliesrv, once the I/O threads have joined and while their contexts still exist.
  void release();

  struct State;

 private:
  explicit ToolHost(std::shared_ptr<State> s) : s_(std::move(s)) {}
  std::shared_ptr<State> s_;
};

}  // namespace ollie
