// The compaction procedure (spec §8.5.3) and `ctl compact` (§3.3).
#include "compaction.hpp"

#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/use_awaitable.hpp>

#include <cctype>

#include "agent.hpp"
#include "hub.hpp"
#include "session.hpp"
#include "settings.hpp"

namespace ollie {

// ---- the procedure ----

namespace {

const char* trigger_state(Trigger why) { return why == Trigger::manual ? "idle" : "thinking"; }

std::string pruned_text(const Pruned& p) {
  return "pruned " + std::to_string(p.results) + " tool results (" + std::to_string(p.bytes) + " bytes)";
}

/// §8.5.3 step 6: [userPrompts] + the summary message + the hot zone.
void replace_old(std::vector<HistoryMessage>& h, std::size_t hot, const std::string& user_prompts, const HistoryMessage& sm) {
  std::vector<HistoryMessage> fresh;
  if (!user_prompts.empty()) {
    HistoryMessage up;
    up.msg.role = backend::Role::user;
    up.msg.content = user_prompts;
    fresh.push_back(std::move(up));
  }
  fresh.push_back(sm);
  fresh.insert(fresh.end(), std::make_move_iterator(h.begin() + static_cast<std::ptrdiff_t>(hot)),
               std::make_move_iterator(h.end()));
  h = std::move(fresh);
}

/// The summary text with its trailing blanks removed ("" = empty).
std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

}  // namespace

asio::awaitable<int> Compaction::context_length(std::shared_ptr<Agent> ap, std::chrono::steady_clock::duration patience) {
  Agent& a = *ap;
  std::shared_ptr<backend::Backend> be;
  std::string backend_name, model;
  {
    std::lock_guard lock(a.mu);
    if (a.stats.context_length > 0) co_return a.stats.context_length;  // 0: not asked since the last change
    be = a.backend_;
    backend_name = a.backend_name;
    model = a.model;
  }
  if (!be) co_return 128000;
  // The provider's value, asked once per backend and model by whoever needs it first; asking
  // may block: not on an I/O thread, and a stop or a flush does not wait for a provider that does
  // not answer. A provider that has no value for the model gives "unknown" (128000, §8.5.1), kept
  // until `invalidate`. A failed ask is "unknown" for now and kept as a failure for the memo's
  // while (30 s), then asked again: a models endpoint that stalls costs one wait per while, not
  // one before every request, and an ollama that was not up yet at the first turn gets its real
  // window (the num_ctx its requests are sent, §8.16) instead of 128000 for good.
  const Memo<int>::Load ask = [be, model]() -> p9::Result<int> {  // named: no temporary in a co_await (GCC 12)
    auto r = be->context_length(model);
    if (!r) return p9::error(r.error().message);
    return *r > 0 ? *r : 128000;
  };
  const auto memo = a.hub.caches.context_length(backend_name, model);
  const auto got = co_await memo.get(a.hub.asks, ask, patience);
  if (!got || !*got) co_return 128000;  // still asking, or the ask failed: unknown for now, not kept
  const int len = **got;
  std::lock_guard lock(a.mu);
  if (a.model == model && a.backend_name == backend_name) a.stats.context_length = len;
  co_return len;
}

// A manual compaction runs under a hold, outside any turn: `stop` (§8.9) reaches its summary
// request through the agent's stop signal instead of a turn's cancellation.
asio::awaitable<p9::Result<std::string>> Compaction::stoppable(std::shared_ptr<Agent> a,
                                                               asio::awaitable<p9::Result<std::string>> ask) {
  std::uint64_t held_at;
  {
    std::lock_guard lock(a->mu);
    held_at = a->held_at_;
  }
  using namespace asio::experimental::awaitable_operators;
  auto stop = a->stopped_->wait(held_at);  // named: GCC 12 and temporaries in co_await
  auto either = std::move(ask) || std::move(stop);
  try {
    auto r = co_await std::move(either);
    if (r.index() == 1) co_return p9::error("interrupted");
    co_return std::move(std::get<0>(r));
  } catch (const asio::multiple_exceptions&) {  // both cancelled: olliesrv stops
    co_return p9::error("interrupted");
  }
}

asio::awaitable<p9::Result<Compacted>> Compaction::run(std::shared_ptr<Agent> ap, std::shared_ptr<Session> s,
                                                      Trigger why, Summarizer summarize) {
  Agent& a = *ap;
  const bool automatic = why != Trigger::manual;
  const int context = co_await context_length(ap);
  std::vector<HistoryMessage> snapshot;
  std::string user_prompts, system;
  int percent;
  std::optional<int> max_tokens;
  {
    std::lock_guard lock(a.mu);
    if (!compactable(a.history, a.user_prompts)) co_return Compacted{};
    snapshot = a.history;
    user_prompts = a.user_prompts;
    system = a.system_prompt;
    percent = a.profile.compact_at;
    max_tokens = to_generation_params(a.profile.params).max_tokens;
  }
  a.set_state("compacting");
  auto fail = [&](const std::string& reason) -> p9::Result<Compacted> {
    a.set_state(trigger_state(why));
    if (!automatic) return p9::error("compact: " + reason);
    a.transcript.append(make_block("error", "compact: " + reason));
    return Compacted{};
  };
  // 1. The snapshot first: nothing is dropped that the recovery file does not hold.
  auto write = [&a, sid = s->id, snapshot]() -> asio::awaitable<p9::Status> {  // named: see lifecycle.cpp
    co_return a.hub.store.append_compaction(sid, a.id, snapshot);
  };
  // A sub-agent is not persisted (§7.7): nothing of it is written, this file neither.
  if (!a.subagent)
    if (auto st = co_await asio::co_spawn(a.hub.blocking, write, asio::use_awaitable); !st) co_return fail(st.ename());

  const std::size_t hot = hot_start(snapshot), lead = old_start(snapshot, user_prompts);
  Compacted done;
  if (automatic) {
    // Old tool output goes before anything is summarized: cold results, then warm ones.
    Pruned pruned;
    bool enough = false;
    for (const char* tier : {"cold", "warm"}) {
      std::lock_guard lock(a.mu);
      pruned += prune(a.history, hot, tier);
      enough = why == Trigger::threshold && !over_trigger(estimate_tokens(system.size(), a.history), context, percent);
      if (enough) break;
    }
    if (pruned.results > 0) {
      done.changed = true;
      a.transcript.append(make_block("info", pruned_text(pruned)));
      s->save_soon();
    }
    if (enough) {
      a.set_state(trigger_state(why));
      co_return done;
    }
    std::lock_guard lock(a.mu);
    snapshot = a.history;
  }

  const std::vector<HistoryMessage> old(snapshot.begin() + static_cast<std::ptrdiff_t>(lead),
                                        snapshot.begin() + static_cast<std::ptrdiff_t>(hot));
  backend::ChatRequest req;
  {
    std::lock_guard lock(a.mu);
    req.model = a.model;
  }
  req.params.max_tokens = max_tokens.value_or(SUMMARY_MAX_TOKENS);
  for (std::string text : {flatten(old, context), std::string(SUMMARY_INSTRUCTION)}) {
    backend::Message m;
    m.role = backend::Role::user;
    m.content = std::move(text);
    req.messages.push_back(std::move(m));
  }
  auto ask = summarize(std::move(req));
  p9::Result<std::string> answer = p9::error("interrupted");
  if (automatic) {
    answer = co_await std::move(ask);  // the turn's cancellation reaches it
  } else {
    auto asked = stoppable(ap, std::move(ask));  // named: GCC 12 and temporaries in co_await
    answer = co_await std::move(asked);
  }
  if (!answer) co_return fail(answer.ename());
  const std::string summary = trimmed(std::move(*answer));
  if (summary.empty()) co_return fail("empty summary");

  HistoryMessage sm;
  sm.msg.role = backend::Role::user;
  sm.msg.content = summary_message(summary, warm_index(old), latest_request(snapshot, lead, hot));
  bool replaced = false;
  {
    std::lock_guard lock(a.mu);
    replaced = a.history.size() == snapshot.size();  // else changed meanwhile: the caller owns it, so never
    if (replaced) {
      replace_old(a.history, hot, a.user_prompts, sm);
    }
  }
  if (!replaced) co_return fail("history changed during compaction");
  done = Compacted{true, old.size()};
  a.transcript.append(make_block("context", sm.msg.content, "compaction"));
  a.transcript.append(make_block("info", "compacted " + std::to_string(done.removed) + " messages"));
  s->save_soon();
  a.set_state(trigger_state(why));
  co_return done;
}

bool compactable(const Agent& a) {
  std::lock_guard lock(a.mu);
  return compactable(a.history, a.user_prompts);
}

asio::awaitable<p9::Result<std::size_t>> compact(std::shared_ptr<Agent> a, std::shared_ptr<Session> s) {
  auto summarizer = [a, s](backend::ChatRequest req) { return summarize(a, s, std::move(req)); };
  auto r = co_await Compaction::run(a, s, Trigger::manual, summarizer);
  if (!r) co_return p9::error(r.ename());
  co_return r->removed;
}

}  // namespace ollie
