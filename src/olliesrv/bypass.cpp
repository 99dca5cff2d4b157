// The bypass broker (spec §6.9.2). GCC 12: the coroutines here build no JSON from braced lists
// of literals; the records are made by the plain functions below.
#include "bypass.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <vector>

#include "backend/config.hpp"
#include "hub.hpp"
#include "lib9p/fcall.hpp"
#include "lifecycle.hpp"
#include "off_io.hpp"
#include "session.hpp"

namespace ollie {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

/// Longest line of toolsrv's bypass/pending kept: a request carries a call's arguments, which
/// proc/new bounds at 16 MiB. A longer one is skipped (toolsrv denies it at its timeout).
constexpr std::size_t max_pending_line = 17u << 20;

std::string verdict_word(bool allow) { return allow ? "allow" : "deny"; }

/// The fields of a request line (§6.9.1), checked.
bool request_fields(const json& j, std::string& agent, std::string& tool, json& args, std::string& cwd, bool& background) {
  const auto str = [&](const char* k, std::string& into) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_string()) return false;
    into = it->get<std::string>();
    return true;
  };
  auto a = j.find("args");
  if (!str("agent", agent) || !str("tool", tool) || !str("cwd", cwd) || a == j.end() || !a->is_object()) return false;
  args = *a;
  auto b = j.find("background");
  background = b != j.end() && b->is_boolean() && b->get<bool>();
  return true;
}

/// temp file, fsync, rename, fsync of the directory; 0600.
p9::Status write_atomic(const std::string& path, const std::string& text) {
  const auto dir = std::filesystem::path(path).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return p9::error(tmp + ": " + std::strerror(errno));
  std::size_t at = 0;
  bool ok = ::fchmod(fd, 0600) == 0;
  while (ok && at < text.size()) {
    const auto n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) at += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(ok ? errno : err);
    ::unlink(tmp.c_str());
    return p9::error(path + ": " + why);
  }
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  return {};
}

/// A `bypass` block in the agent's chat, unless it or its session was killed (a killed agent's
/// blocks must not recreate the directory its kill removed).
void note(const Session& s, const std::shared_ptr<Agent>& a, const std::string& text) {
  if (!a || text.empty()) return;
  {
    std::lock_guard lock(s.mu);
    if (s.killed) return;
  }
  {
    std::lock_guard lock(a->mu);
    if (a->killed) return;
  }
  a->note("bypass", text);
}

std::string agent_name(const Session& s, const std::string& agent_id) {
  auto a = s.find(agent_id);
  return a ? a->current_name() : agent_id;
}

/// One resolution line of the hostowner (§2.3).
struct Resolution {
  std::uint64_t reqid = 0;
  bool allow = false, always = false;
};

constexpr const char* usage = "usage: <reqid> allow [always] | deny";

/// A reqid as olliesrv shows it: a canonical decimal (no sign, no leading zero, in range). Any
/// other spelling names no request: `03 deny` must not resolve request 3 by accident.
std::optional<std::uint64_t> parse_reqid(std::string_view w) {
  if (w.empty() || w[0] < '1' || w[0] > '9') return std::nullopt;  // also 0, never issued
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), n);
  if (ec != std::errc{} || end != w.data() + w.size()) return std::nullopt;
  return n;
}

p9::Result<std::vector<Resolution>> parse_answers(std::string_view text) {
  std::vector<Resolution> out;
  std::size_t at = 0;
  while (at < text.size()) {
    auto nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    std::vector<std::string_view> w;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) i++;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') j++;
      if (j > i) w.push_back(line.substr(i, j - i));
      i = j;
    }
    if (w.empty()) continue;
    Resolution a;
    if (w.size() == 2 && w[1] == "allow") a.allow = true;
    else if (w.size() == 3 && w[1] == "allow" && w[2] == "always") a.allow = a.always = true;
    else if (w.size() != 2 || w[1] != "deny") return p9::error(usage);
    const auto reqid = parse_reqid(w[0]);
    if (!reqid) return p9::error("no such request: " + bypass::shown(w[0]));
    a.reqid = *reqid;
    out.push_back(a);
  }
  return out;
}

/// Appends an `allow always` rule to the session policy (persisted); the error says why none was.
p9::Status add_rule(Session& s, const std::string& tool, const bypass::Summary& summary) {
  auto rule = bypass::allow_rule(tool, summary);
  if (!rule) return rule.error();
  {
    std::lock_guard lock(s.mu);
    std::string& text = s.bypass;
    const bool present = text == *rule + "\n" || text.rfind(*rule + "\n", 0) == 0 || text.find("\n" + *rule + "\n") != std::string::npos;
    if (!present) {
      std::string next = text;
      if (!next.empty() && next.back() != '\n') next += '\n';
      next += *rule + "\n";
      if (next.size() > bypass::max_text) return p9::error("session policy full");
      text = std::move(next);
    }
  }
  return {};  // saved by answer() before its reply
}

json audit_record(const Session& s, std::uint64_t reqid, const std::string& agent, const std::string& agent_name,
                  const std::string& tool, const json& args, const bypass::Summary& summary, const std::string& cwd,
                  bool background, std::int64_t requested, bool allow, const std::string& by, const std::string& how,
                  const std::string& who, const json& extra) {
  json r = {{"session", s.id},       {"sessionName", s.current_name()},
            {"agent", agent},        {"agentName", agent_name},
            {"reqid", reqid},        {"tool", tool},
            {"args", args},          {"summary", summary.text},
            {"cwd", cwd},            {"background", background},
            {"requested", rfc3339(requested)},
            {"decision", verdict_word(allow)},
            {"by", by},              {"how", how}};
  if (!who.empty()) r["who"] = who;
  for (const auto& [k, v] : extra.items()) r[k] = v;
  return r;
}

}  // namespace

// ---- the global policy --------------------------------------------------------------------------

Bypass::Bypass(Hub& hub, const std::string& data_root)
    : hub_(hub), audit_(hub.blocking, data_root + "/bypass.audit.jsonl") {
  file_->path = hub.config_root + "/bypass.policy";
  // As every configuration file: a FIFO or a link to /dev/zero put there cannot hold the start.
  std::string text, err;
  switch (backend::read_config_file(file_->path, 1u << 20, text, err)) {
    case backend::ReadStatus::ok: break;
    case backend::ReadStatus::missing: return;
    case backend::ReadStatus::too_large: err = "larger than 1 MiB"; [[fallthrough]];
    case backend::ReadStatus::failed:
      spdlog::error("{}: {}; none of it applies: every bypass request asks the hostowner", file_->path, err);
      return;
  }
  auto p = bypass::parse(text, bypass::Scope::global);
  if (!p) spdlog::error("{}: {}; none of it applies: every bypass request asks the hostowner", file_->path, p.ename());
  else policy_ = std::move(*p);
  policy_text_ = std::move(text);
}

std::string Bypass::policy() const {
  std::lock_guard lock(mu_);
  return policy_text_;
}

asio::awaitable<p9::Status> Bypass::set_policy(std::string text) {
  auto p = bypass::parse(text, bypass::Scope::global);
  if (!p) co_return p.error();
  const auto pairs = p->sandbox;
  {
    std::lock_guard lock(mu_);
    policy_text_ = text;
    policy_ = std::move(*p);
  }
  {
    std::lock_guard lock(file_->mu);
    file_->text = std::move(text);
    file_->pending = true;
  }
  for (const auto& s : hub_.sessions()) s->host->set_sandbox_ok(pairs);
  // Written before the reply (a kill -9 after it keeps the policy). A write already under way
  // holds write_mu: this one waits for it, then writes the newest text unless it took it.
  auto write = [f = file_] { persist(f); };  // named: see off_io
  co_await off_io<void>(hub_, write);
  co_return p9::Status{};
}

void Bypass::persist(const std::shared_ptr<PolicyFile>& f) {
  std::lock_guard writing(f->write_mu);
  std::string text;
  {
    std::lock_guard lock(f->mu);
    if (!f->pending) return;  // a write before this one took the newest text
    f->pending = false;
    text = f->text;
  }
  if (auto st = write_atomic(f->path, text); !st) spdlog::error("bypass policy not saved: {}", st.ename());
}

p9::Status Bypass::set_session_policy(Session& s, std::string text) {
  if (auto p = bypass::parse(text, bypass::Scope::session); !p) return p.error();
  {
    std::lock_guard lock(s.mu);
    if (text != s.bypass) s.bypass_changed = std::time(nullptr);
    s.bypass = std::move(text);
  }
  return {};
}

bypass::Decision Bypass::decide(Session& s, const std::string& tool, const bypass::Summary& summary) const {
  std::string text;
  {
    std::lock_guard lock(s.mu);
    text = s.bypass;
  }
  auto mine = bypass::parse(text, bypass::Scope::session);
  if (!mine) {
    spdlog::warn("session {}: bypass policy: {}; none of it applies", s.id, mine.ename());
    mine = bypass::Policy{};
  }
  std::lock_guard lock(mu_);
  return bypass::decide(*mine, policy_, tool, summary);
}

// ---- sessions -------------------------------------------------------------------------------------

void Bypass::attach(const std::shared_ptr<Session>& s) {
  std::vector<std::pair<std::string, std::string>> pairs;
  {
    std::lock_guard lock(mu_);
    sessions_.try_emplace(s->id);
    pairs = policy_.sandbox;
  }
  s->host->set_sandbox_ok(std::move(pairs));
  std::weak_ptr<Session> ws = s;
  auto ex = hub_.next_executor();
  s->host->on_start([ws, ex](std::uint64_t instance) { asio::co_spawn(ex, follow(ws, instance), asio::detached); });
}

void Bypass::detach(const Session& s) {
  SessionState st;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(s.id);
    if (it == sessions_.end()) return;
    st = std::move(it->second);
    sessions_.erase(it);
  }
  for (const auto& [reqid, e] : st.entries) report(s, reqid, e, End{false, "session killed", "session killed", "", ""});
}

asio::awaitable<void> Bypass::follow(std::weak_ptr<Session> ws, std::uint64_t instance) {
  p9::Result<p9::AsyncFid> f = p9::error("session gone");
  if (auto s = ws.lock()) {
    auto host = s->host;
    s.reset();
    f = co_await host->open(instance, "bypass/pending", p9::OREAD);
  }
  if (f) {
    std::string buf;
    bool skipping = false;  // inside a line longer than max_pending_line
    for (;;) {
      auto r = co_await f->read();
      if (!r || r->empty()) break;
      buf += *r;
      std::size_t at = 0;
      for (auto nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n', at)) {
        std::string line = buf.substr(at, nl - at);
        at = nl + 1;
        if (skipping) {
          skipping = false;
          continue;
        }
        co_await on_line(ws, instance, std::move(line));
      }
      buf.erase(0, at);
      if (buf.size() > max_pending_line) {
        spdlog::warn("toolsrv bypass request longer than {} bytes skipped", max_pending_line);
        buf.clear();
        skipping = true;
      }
    }
  } else {
    spdlog::warn("bypass/pending: {}", f.ename());
  }
  if (auto s = ws.lock()) s->hub.bypass.on_instance_end(*s, instance);
}

asio::awaitable<void> Bypass::on_line(std::weak_ptr<Session> ws, std::uint64_t instance, std::string line) {
  auto s = ws.lock();
  if (!s) co_return;
  json j = json::parse(line, nullptr, false);
  auto id = j.is_object() ? j.find("id") : j.end();
  if (j.is_discarded() || !j.is_object() || id == j.end() || !id->is_string()) {
    spdlog::warn("session {}: bad bypass/pending line", s->id);
    co_return;
  }
  if (auto r = j.find("resolved"); r != j.end()) {
    auto why = j.find("reason");
    const std::string reason = why != j.end() && why->is_string() ? why->get<std::string>() : "withdrawn";
    s->hub.bypass.on_withdrawn(*s, instance, id->get<std::string>(), reason);
    co_return;
  }
  co_await s->hub.bypass.on_request(s, instance, std::move(j));
}

// ---- one request ------------------------------------------------------------------------------------

asio::awaitable<void> Bypass::on_request(std::shared_ptr<Session> s, std::uint64_t instance, json j) {
  Entry e;
  e.instance = instance;
  e.tsid = j["id"].get<std::string>();
  if (!request_fields(j, e.agent, e.tool, e.args, e.cwd, e.background)) {
    spdlog::warn("session {}: bypass request {} without its fields: denied", s->id, e.tsid);
    (void)co_await resolve(s, instance, e.tsid + " deny");
    co_return;
  }
  e.summary = bypass::summarize(e.args);
  e.requested = static_cast<std::int64_t>(std::time(nullptr));
  // The id is saved before it is shown (§7.7): no restart reuses an id a person has seen.
  std::uint64_t reqid;
  {
    std::lock_guard lock(s->mu);
    reqid = ++s->bypass_counter;
  }
  auto save = [s]() -> asio::awaitable<void> {
    (void)s->save();
    co_return;
  };
  co_await asio::co_spawn(hub_.blocking, save, asio::use_awaitable);

  const auto d = decide(*s, e.tool, e.summary);
  const std::string n = std::to_string(reqid);
  End end;
  if (d.verdict != bypass::Verdict::ask) {
    end.allow = d.verdict == bypass::Verdict::allow;
    end.by = "policy";
    end.how = d.by;
    end.block = (end.allow ? "auto-approved " : "auto-denied ") + n + " (policy)";
  } else if (rate_limited(s->id)) {
    end.by = "rate limit";
    end.how = "more than " + std::to_string(rate_limit) + " requests within " + std::to_string(rate_window.count()) + " s";
    end.block = "rate limited: denied " + n;
  } else {
    const std::string agent = e.agent, tool = e.tool, summary = bypass::escape(e.summary.text);
    e.listed = true;
    if (!insert(s->id, reqid, std::move(e))) {
      (void)co_await resolve(s, instance, j["id"].get<std::string>() + " deny");
      co_return;
    }
    note(*s, s->find(agent), "request " + n + ": " + tool + " " + summary);
    s->hub.bus.publish("bypass." + s->id + ".request",
                       n + " session/" + s->current_name() + "/agent/" + agent_name(*s, agent) + " " + tool);
    co_return;
  }
  const std::string agent = e.agent, tsid = e.tsid;
  if (!insert(s->id, reqid, std::move(e))) {
    (void)co_await resolve(s, instance, tsid + " deny");  // the session is gone
    co_return;
  }
  show(*s, agent, end);
  co_await forward(s, reqid, std::move(end));
}

asio::awaitable<p9::Status> Bypass::resolve(std::shared_ptr<Session> s, std::uint64_t instance, std::string line) {
  auto f = co_await s->host->open(instance, "bypass/resolve", p9::OWRITE);
  if (!f) co_return f.error();
  if (auto w = co_await f->write(line + "\n"); !w) co_return w.error();
  co_return co_await f->clunk();
}

bool Bypass::rate_limited(const std::string& session_id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return true;
  auto& st = it->second;
  const auto now = Clock::now();
  while (!st.asks.empty() && now - st.asks.front() >= rate_window) st.asks.pop_front();
  st.asks.push_back(now);
  while (st.asks.size() > rate_limit + 1) st.asks.pop_front();
  if (now < st.limited_until) return true;
  if (st.asks.size() <= rate_limit) return false;
  st.limited_until = now + rate_penalty;
  return true;
}

bool Bypass::insert(const std::string& session_id, std::uint64_t reqid, Entry e) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return false;
  it->second.entries.emplace(reqid, std::move(e));
  return true;
}

bool Bypass::finish(const Session& s, std::uint64_t reqid, End end) {
  Entry e;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(s.id);
    if (it == sessions_.end()) return false;
    auto en = it->second.entries.find(reqid);
    if (en == it->second.entries.end()) return false;
    e = std::move(en->second);
    it->second.entries.erase(en);
  }
  report(s, reqid, e, end);
  return true;
}

void Bypass::on_withdrawn(const Session& s, std::uint64_t instance, const std::string& tsid, const std::string& reason) {
  std::uint64_t reqid = 0;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(s.id);
    if (it == sessions_.end()) return;
    for (const auto& [r, e] : it->second.entries)
      if (e.instance == instance && e.tsid == tsid) reqid = r;
  }
  if (reqid == 0) return;  // decided already: its resolve crossed the end
  const std::string why = bypass::escape(reason.substr(0, 32));
  finish(s, reqid, End{false, why == "timeout" ? "timeout" : "withdrawal", why, "denied " + std::to_string(reqid) + " (" + why + ")", ""});
}

void Bypass::on_instance_end(const Session& s, std::uint64_t instance) {
  std::vector<std::uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(s.id);
    if (it == sessions_.end()) return;
    for (const auto& [r, e] : it->second.entries)
      if (e.instance == instance) ids.push_back(r);
  }
  for (auto r : ids)
    finish(s, r, End{false, "restart", "tool server restarted", "denied " + std::to_string(r) + " (tool server restarted)", ""});
}

void Bypass::report(const Session& s, std::uint64_t reqid, const Entry& e, const End& end) {
  const auto a = s.find(e.agent);
  note(s, a, end.block);
  s.hub.bus.publish("bypass." + s.id + ".resolve", std::to_string(reqid) + " " + verdict_word(end.allow));
  audit_.append(audit_record(s, reqid, e.agent, a ? a->current_name() : "", e.tool, e.args, e.summary, e.cwd,
                             e.background, e.requested, end.allow, end.by, end.how, end.who, end.extra));
}

// ---- the hostowner ----------------------------------------------------------------------------------

std::string Bypass::pending(const Session& s) const {
  struct Row {
    std::uint64_t reqid;
    std::string agent, tool, summary;
  };
  std::vector<Row> rows;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(s.id);
    if (it == sessions_.end()) return "";
    for (const auto& [r, e] : it->second.entries)
      if (e.listed) rows.push_back({r, e.agent, e.tool, e.summary.text});
  }
  std::string out;
  for (const auto& r : rows)
    out += std::to_string(r.reqid) + "\t" + agent_name(s, r.agent) + "\t" + r.tool + "\t" + bypass::escape(r.summary) + "\n";
  return out;
}

asio::awaitable<p9::Status> Bypass::answer(std::shared_ptr<Session> s, std::string text, std::string who) {
  auto answers = parse_answers(text);
  if (!answers) co_return answers.error();
  struct Taken {
    Resolution a;
    std::string agent, tool;
    bypass::Summary summary;
  };
  std::vector<Taken> taken;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(s->id);
    // All lines are checked before any is applied: a bad one leaves every request waiting.
    std::vector<std::uint64_t> seen;
    for (const auto& a : *answers) {
      const bool known = it != sessions_.end() && it->second.entries.count(a.reqid) && it->second.entries.at(a.reqid).listed;
      if (!known || std::find(seen.begin(), seen.end(), a.reqid) != seen.end())
        co_return p9::error("no such request: " + std::to_string(a.reqid));
      seen.push_back(a.reqid);
    }
    for (const auto& a : *answers) {
      auto& e = it->second.entries.at(a.reqid);
      e.listed = false;
      taken.push_back({a, e.agent, e.tool, e.summary});
    }
  }
  p9::Status result;
  bool ruled = false;
  for (auto& t : taken) {
    End end{t.a.allow, "hostowner", t.a.always ? "allow always" : verdict_word(t.a.allow),
            (t.a.allow ? "approved " : "denied ") + std::to_string(t.a.reqid), who};
    if (t.a.always) {
      if (auto st = add_rule(*s, t.tool, t.summary); st) {
        end.extra["rule"] = *bypass::allow_rule(t.tool, t.summary);
        ruled = true;
      } else {
        end.extra["rule"] = nullptr;
        end.extra["ruleError"] = st.ename();
        if (result) result = p9::error("allow always: " + st.ename() + ", allowed once");
      }
    }
    // Every decision of this write is in the chat before toolsrv hears any of them.
    show(*s, t.agent, end);
    asio::co_spawn(hub_.next_executor(), forward(s, t.a.reqid, std::move(end)), asio::detached);
  }
  // The session policy's new rules are on disk before the reply (§7.7); a failed save keeps them
  // in memory and says so, as every change does.
  if (ruled) {
    if (auto st = co_await save_change(hub_, s); !st && result) result = st;
  }
  co_return result;
}

void Bypass::show(const Session& s, const std::string& agent, End& end) {
  note(s, s.find(agent), end.block);
  end.block.clear();
}

asio::awaitable<void> Bypass::forward(std::shared_ptr<Session> s, std::uint64_t reqid, End end) {
  Bypass& b = s->hub.bypass;
  std::uint64_t instance = 0;
  std::string tsid;
  {
    std::lock_guard lock(b.mu_);
    auto it = b.sessions_.find(s->id);
    if (it == b.sessions_.end() || !it->second.entries.count(reqid)) co_return;
    instance = it->second.entries.at(reqid).instance;
    tsid = it->second.entries.at(reqid).tsid;
  }
  auto st = co_await resolve(s, instance, tsid + " " + verdict_word(end.allow));
  // Not delivered: the request stays until toolsrv reports its end (timeout, withdrawal) or its
  // instance is gone, and that end's block follows the decision shown, which did not apply.
  if (!st) spdlog::info("session {}: bypass {}: {} not delivered: {}", s->id, reqid, verdict_word(end.allow), st.ename());
  else b.finish(*s, reqid, std::move(end));
}

}  // namespace ollie
