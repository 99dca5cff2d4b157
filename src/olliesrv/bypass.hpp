#pragma once
/// The bypass broker, olliesrv side (spec §6.9.2): follows every session's toolsrv
/// `bypass/pending`, gives each request an olliesrv request id (the session's `bypassCounter`,
/// saved before the id is shown), decides it by the session policy then the global one
/// (§6.9.3), applies the rate limit to what is left to the hostowner, lists those in
/// `bypass/pending/<session>` and resolves them on the hostowner's answer; requests that end in
/// toolsrv (timeout, withdrawal) or with their toolsrv leave the list. Every decision is a
/// `bypass` block in the asking agent's chat, a `bypass.<sid>.resolve` event and a line of the
/// audit log (bypass_audit.hpp).
///
/// Threads: toolsrv's lines arrive on the session's ToolHost executor, one at a time; the
/// hostowner's answers on 9P threads. All state is under one mutex, never held while calling
/// into a session, an agent or the bus.

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bypass_audit.hpp"
#include "bypass_policy.hpp"
#include "lib9p/result.hpp"

namespace ollie {

class Session;
struct Hub;

class Bypass {
 public:
  /// More than rate_limit requests left to the hostowner within rate_window deny them all for
  /// rate_penalty (§6.9.2).
  static constexpr std::size_t rate_limit = 5;
  static constexpr std::chrono::seconds rate_window{60}, rate_penalty{300};

  /// Reads `<config root>/bypass.policy` (a bad one is logged and nothing in it applies: every
  /// request asks); the audit log lives at `<data root>/bypass.audit.jsonl`.
  Bypass(Hub& hub, const std::string& data_root);
  Bypass(const Bypass&) = delete;
  Bypass& operator=(const Bypass&) = delete;

  // ---- the global policy: /bypass/policy ----
  std::string policy() const;
  /// Validated (`policy line <n>: <reason>`), applied at once, its `sandbox` pairs pushed to
  /// every session's toolsrv; done once the file is written (atomically, on the blocking pool).
  asio::awaitable<p9::Status> set_policy(std::string text);

  // ---- a session's policy: session/{s}/bypass ----
  static p9::Status set_session_policy(Session& s, std::string text);

  // ---- sessions (Hub::add, Hub::remove) ----
  /// Follows the session's toolsrv requests from now on and gives it the approved overrides.
  void attach(const std::shared_ptr<Session>& s);
  /// The session is gone: its requests end (audited), and nothing more is followed.
  void detach(const Session& s);

  // ---- the hostowner: /bypass/pending/{session} ----
  /// `reqid<TAB>agent-name<TAB>tool<TAB>summary` lines, by reqid, the summary escaped.
  std::string pending(const Session& s) const;
  /// Resolution lines `<reqid> allow`, `<reqid> allow always`, `<reqid> deny`; all are checked
  /// before any is applied. `who`: the hostowner's name, for the audit log. Done once the
  /// session's rules added by `allow always` are saved.
  asio::awaitable<p9::Status> answer(std::shared_ptr<Session> s, std::string text, std::string who);

  const std::string& audit_path() const { return audit_.path(); }

 private:
  struct Entry {
    std::uint64_t instance = 0;  ///< the toolsrv instance that asked (ToolHost's serial)
    std::string tsid;            ///< that instance's request id
    std::string agent, tool, cwd;
    nlohmann::json args;
    bypass::Summary summary;
    bool background = false;
    std::int64_t requested = 0;  ///< Unix time
    bool listed = false;         ///< waiting for the hostowner (else being decided or answered)
  };
  struct SessionState {
    std::map<std::uint64_t, Entry> entries;  ///< by reqid
    std::deque<std::chrono::steady_clock::time_point> asks;
    std::chrono::steady_clock::time_point limited_until{};
  };
  /// How one request ended.
  struct End {
    bool allow = false;
    std::string by;     ///< hostowner, policy, rate limit, timeout, withdrawal, restart, session killed
    std::string how;    ///< the verb, the rule, the reason
    std::string block;  ///< the agent's `bypass` block; empty once show() showed it
    std::string who;    ///< the hostowner's name, when it answered
    nlohmann::json extra = nlohmann::json::object();
  };

  /// Reads bypass/pending of toolsrv instance `instance` until that instance is gone.
  static asio::awaitable<void> follow(std::weak_ptr<Session> ws, std::uint64_t instance);
  static asio::awaitable<void> on_line(std::weak_ptr<Session> ws, std::uint64_t instance, std::string line);
  asio::awaitable<void> on_request(std::shared_ptr<Session> s, std::uint64_t instance, nlohmann::json j);
  /// toolsrv ended a request without a resolve line (`timeout`, `withdrawn`).
  void on_withdrawn(const Session& s, std::uint64_t instance, const std::string& tsid, const std::string& reason);
  /// The instance is gone: its requests end.
  void on_instance_end(const Session& s, std::uint64_t instance);
  /// Appends a decision's block to the agent's chat, before the decision is sent: §6.9.2's order
  /// is the decision, then what the call does, and once toolsrv has it the call's result may come
  /// first.
  static void show(const Session& s, const std::string& agent, End& end);
  /// Sends a decision (shown already) to toolsrv, then ends the request (event, audit).
  static asio::awaitable<void> forward(std::shared_ptr<Session> s, std::uint64_t reqid, End end);
  /// `<toolsrv id> allow|deny` to bypass/resolve of that instance.
  static asio::awaitable<p9::Status> resolve(std::shared_ptr<Session> s, std::uint64_t instance, std::string line);
  /// Adds a request the broker tracks; false when the session was detached.
  bool insert(const std::string& session_id, std::uint64_t reqid, Entry e);
  /// Removes the request and reports its end; false when it had ended already.
  bool finish(const Session& s, std::uint64_t reqid, End end);
  void report(const Session& s, std::uint64_t reqid, const Entry& e, const End& end);
  bypass::Decision decide(Session& s, const std::string& tool, const bypass::Summary& summary) const;
  /// Counts a request left to the hostowner; true when the rate limit denies it.
  bool rate_limited(const std::string& session_id);

  /// bypass.policy as last set, written on the blocking pool, the newest text last.
  struct PolicyFile {
    std::string path;
    std::mutex mu;        // text, pending
    std::mutex write_mu;  // one write at a time
    std::string text;
    bool pending = false;
  };
  static void persist(const std::shared_ptr<PolicyFile>& f);

  Hub& hub_;
  std::shared_ptr<PolicyFile> file_ = std::make_shared<PolicyFile>();
  BypassAudit audit_;
  mutable std::mutex mu_;
  std::string policy_text_;
  bypass::Policy policy_;
  std::map<std::string, SessionState> sessions_;  ///< by session id
};

}  // namespace ollie
