// session/prompt and session/cancel: the prompt written to the agent's `prompt`, its turn
// streamed from `chat.raw`, its end told by the agent's state events (spec §2.8, §5).
#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <spdlog/spdlog.h>

#include "acp/bridge.hpp"
#include "acp/prompt.hpp"
#include "acp/updates.hpp"

namespace acp {
namespace {

std::string str(const json& b, const char* key) {
  auto it = b.find(key);
  return it != b.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Whether a block is the user block of the prompt the bridge wrote (stored: its text as olliesrv
// stores it): the hostowner's (no origin name), with that text.
bool ours(const json& b, const std::string& stored) {
  return str(b, "role") == "user" && str(b, "name").empty() && str(b, "content") == stored;
}

// The ids of the finalized blocks of a log.raw, and whether our prompt's block is among those
// not in old.
struct Snapshot {
  std::set<std::string> ids;
  std::string last;
  bool mine = false;
};

Snapshot snapshot(const std::string& log, const std::set<std::string>* old, const std::string& stored) {
  Snapshot s;
  for (const auto& l : lines(log)) {
    json b = json::parse(l, nullptr, false);
    if (!b.is_object() || !b.contains("id") || !b["id"].is_string()) continue;
    std::string id = b["id"].get<std::string>();
    if (old && !old->count(id) && ours(b, stored)) s.mine = true;
    s.last = id;
    s.ids.insert(std::move(id));
  }
  return s;
}

// An agent's state in a session's agent/idx (name, id, state, ... TAB-separated; §2.8.1).
std::string state_of(const std::string& idx, const std::string& aid) {
  for (const auto& l : lines(idx)) {
    const auto t1 = l.find('\t'), t2 = l.find('\t', t1 + 1), t3 = l.find('\t', t2 + 1);
    if (t2 != std::string::npos && l.compare(t1 + 1, t2 - t1 - 1, aid) == 0)
      return l.substr(t2 + 1, t3 == std::string::npos ? std::string::npos : t3 - t2 - 1);
  }
  return "";
}

json text_update(const std::string& text) {
  return {{"sessionUpdate", "agent_message_chunk"}, {"content", {{"type", "text"}, {"text", text}}}};
}

json stop(const char* reason) { return {{"stopReason", reason}}; }

// What the two readers of a turn share.
struct Progress {
  std::set<std::string> seen;  // finalized new blocks streamed so far
  std::string until;           // the last block of the finished turn, once known
  std::optional<std::string> error;
  std::string plan;            // the plan as last sent
};

}  // namespace

asio::awaitable<json> Bridge::prompt(json params) {
  auto live = find(params);
  if (live->turn) throw RpcError(code::invalid_request, "session " + live->id + " is already running a prompt");
  auto text = prompt_text(params.contains("prompt") ? params["prompt"] : json());
  if (!text) throw RpcError(code::invalid_params, text.ename());
  // olliesrv ignores a blank prompt (§2.8.4): no turn would start, and nothing was asked.
  const std::string stored = stored_prompt(*text);
  if (stored.empty()) co_return stop("end_turn");
  auto turn = std::make_shared<Turn>();
  live->turn = turn;
  struct Done {
    std::shared_ptr<Live> live;
    ~Done() { live->turn.reset(); }
  } done{live};
  if (!live->notice.empty()) {
    update(*live, text_update(live->notice + "\n\n"));
    live->notice.clear();
  }

  const std::string dir = live->dir();
  std::string chat_path = dir + "chat.raw", log_path = dir + "log.raw";
  auto chat = co_await ollie_.open(chat_path, p9::OREAD);
  p9::AsyncFid chat_fid = need(std::move(chat), "chat.raw");
  auto log = co_await ollie_.read(log_path);
  std::set<std::string> old = snapshot(need(std::move(log), "log.raw"), nullptr, stored).ids;
  if (is_command(*text)) {
    json r = co_await command(live, std::move(chat_fid), std::move(old), *text);
    co_return r;
  }

  std::string event_path = "event";
  auto ev = co_await ollie_.open(event_path, p9::ORDWR);
  p9::AsyncFid ev_fid = need(std::move(ev), "event");
  std::string filter = "agent." + live->aid + ".state bypass." + live->sid + ".request\n";
  auto filtered = co_await ev_fid.write(filter);
  need(std::move(filtered), "event");
  std::string idx_path = "session/" + live->sid + "/agent/idx";
  std::string ctl_path = dir + "ctl", cwd_verb = "cwd", plan_path = dir + "plan", prompt_path = dir + "prompt";
  auto cwd = co_await ollie_.call(ctl_path, cwd_verb);
  auto plan = co_await ollie_.read(plan_path);
  Progress progress;
  progress.plan = plan ? *plan : std::string();
  // The turn's own, so that its permission requests find the calls they are for (permissions.cpp).
  turn->translator = Translator(cwd ? trim(*cwd) : std::string());
  Translator& t = turn->translator;

  auto submitted = co_await ollie_.write(prompt_path, *text);
  need(submitted, "prompt");
  co_await ask_pending(live);

  Lines chat_lines(std::move(chat_fid)), ev_lines(std::move(ev_fid));
  // The blocks of the turn, as they come. Those before our prompt's block are another client's
  // turn (ours is queued behind it): not shown. Our block itself is not echoed (the editor shows
  // its prompt); a cancel that came before it is carried out now (see cancel()).
  auto stream = [&]() -> asio::awaitable<void> {
    for (;;) {
      auto l = co_await chat_lines.next();
      if (!l || !*l) {
        progress.error = l ? std::string("agent killed") : "olliesrv: " + l.ename();
        if (!l) ollie_.check(l.ename());
        co_return;
      }
      json b = json::parse(**l, nullptr, false);
      if (!b.is_object() || !b.contains("id") || !b["id"].is_string()) continue;
      const std::string id = b["id"].get<std::string>();
      if (old.count(id)) continue;
      const bool partial = b.value("partial", false);
      if (!turn->started && !partial && ours(b, stored)) {
        turn->started = true;
        if (turn->cancelled) asio::co_spawn(ex_, stop_turn(live), [](std::exception_ptr) {});
      } else if (turn->started) {
        for (auto& u : t.block(b)) update(*live, std::move(u));
      }
      if (partial) continue;
      progress.seen.insert(id);
      // A tool round of our turn is over: the plan may have changed.
      if (turn->started && str(b, "role") == "tool" && t.batch_done()) {
        auto now = co_await ollie_.read(plan_path);
        if (now && *now != progress.plan) {
          progress.plan = *now;
          update(*live, plan_update(progress.plan));
        }
      }
      if (id == progress.until) co_return;
    }
  };
  // The agent's state (the turn is over when it is idle and our prompt's block is in the log)
  // and the session's bypass requests.
  const std::string state_topic = "agent." + live->aid + ".state", bypass_topic = "bypass." + live->sid + ".request";
  auto follow = [&]() -> asio::awaitable<void> {
    for (;;) {
      auto l = co_await ev_lines.next();
      if (!l || !*l) {
        progress.error = l ? std::string("olliesrv closed the event stream") : "olliesrv: " + l.ename();
        if (!l) ollie_.check(l.ename());
        co_return;
      }
      const std::string& line = **l;
      const auto sp = line.find(' ');
      const std::string topic = line.substr(0, sp), payload = sp == std::string::npos ? "" : line.substr(sp + 1);
      if (topic == bypass_topic) {
        // <reqid> session/<s>/agent/<a> <tool>
        const auto a = payload.find(' ');
        const std::string reqid = payload.substr(0, a), where = a == std::string::npos ? "" : payload.substr(a + 1);
        const auto s0 = where.find('/') + 1, s1 = where.find('/', s0);
        if (s0 == 0 || s1 == std::string::npos) continue;
        spawn_ask(live, where.substr(s0, s1 - s0), reqid);
        continue;
      }
      if (topic != state_topic || payload != "idle") continue;
      // An idle read late may be the end of the turn ours was queued behind, read once ours has
      // begun. Our block is appended after the state left idle (olliesrv's turn start), so: our
      // block in the log, then the agent still idle, means our turn is over, and a log read
      // after that has all of it.
      auto now = co_await ollie_.read(log_path);
      if (!now || !snapshot(*now, &old, stored).mine) continue;  // an earlier turn's end: ours is queued
      auto agents = co_await ollie_.read(idx_path);
      if (!agents || state_of(*agents, live->aid) != "idle") continue;  // ours runs: its own idle will come
      auto whole = co_await ollie_.read(log_path);
      if (!whole) continue;
      Snapshot s = snapshot(*whole, &old, stored);
      if (progress.seen.count(s.last)) co_return;
      progress.until = s.last;
    }
  };
  {
    using namespace asio::experimental::awaitable_operators;
    auto a = stream();
    auto b = follow();
    auto either = std::move(a) || std::move(b);
    co_await std::move(either);
  }
  for (auto& u : t.unfinished()) update(*live, std::move(u));
  if (progress.error) throw RpcError(code::internal_error, *progress.error);
  auto last_plan = co_await ollie_.read(plan_path);
  if (last_plan && *last_plan != progress.plan) update(*live, plan_update(*last_plan));
  const TurnEnd& end = t.end();
  if (turn->cancelled || end.interrupted) co_return stop("cancelled");
  if (end.refused) co_return stop("refusal");
  if (end.failure) throw RpcError(code::internal_error, "the turn failed: " + *end.failure);
  co_return stop("end_turn");
}

// A `/verb` or `!command`: it starts no turn; its reply is the first new block that is not the
// prompt itself (`info`, `error`, `exec`).
asio::awaitable<json> Bridge::command(std::shared_ptr<Live> live, p9::AsyncFid chat, std::set<std::string> old, std::string text) {
  auto turn = live->turn;
  if (turn->cancelled) co_return stop("cancelled");  // nothing ran yet: nothing will
  std::string prompt_path = live->dir() + "prompt";
  auto submitted = co_await ollie_.write(prompt_path, text);
  need(submitted, "prompt");
  // A `!command` runs at once, beside any turn (§3.4), and `ctl stop` ends it: from here on a
  // cancel sends it (cancel()), and one that came while it was written is carried out now. A
  // `/verb` has nothing to stop: its reply comes at once.
  if (is_shell_command(text)) {
    turn->started = true;
    if (turn->cancelled) co_await stop_turn(live);
  }
  Lines chat_lines(std::move(chat));
  Translator t("");
  for (;;) {
    auto l = co_await chat_lines.next();
    if (!l) {
      ollie_.check(l.ename());
      throw RpcError(code::internal_error, "olliesrv: " + l.ename());
    }
    if (!*l) throw RpcError(code::internal_error, "agent killed");
    json b = json::parse(**l, nullptr, false);
    if (!b.is_object() || !b.contains("id") || !b["id"].is_string() || old.count(b["id"].get<std::string>())) continue;
    const std::string role = b.value("role", "");
    if (b.value("partial", false) || role == "user" || role == "assistant" || role == "reasoning" || role == "call" ||
        role == "tool" || role == "context")
      continue;  // another turn's blocks
    for (auto& u : t.block(b)) update(*live, std::move(u));
    co_return stop(turn->cancelled ? "cancelled" : "end_turn");
  }
}

asio::awaitable<void> Bridge::cancel(json params) {
  if (!initialized_) {  // ACP: nothing comes before initialize; a notification gets no answer
    spdlog::info("acp: session/cancel before initialize: ignored");
    co_return;
  }
  auto live = find(params);
  auto turn = live->turn;
  if (!turn) co_return;
  turn->cancelled = true;
  // Queued behind another client's turn, a stop would stop theirs: ours is stopped once its user
  // block appears (prompt()'s stream). A `!command` is started once written (command()).
  if (!turn->started) co_return;
  co_await stop_turn(live);
}

asio::awaitable<void> Bridge::stop_turn(std::shared_ptr<Live> live) {
  std::string ctl = live->dir() + "ctl", verb = "stop";
  auto r = co_await ollie_.call(ctl, verb);
  if (!r) spdlog::warn("acp: session {}: stop: {}", live->id, r.ename());
}

}  // namespace acp
