// One turn of an agent (spec §8.1.3): the request loop, streaming with the retry table of §8.2,
// the stop reasons, tool dispatch by scope (§8.3.1) and the interrupt of §8.9.

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "agent.hpp"
#include "lib9p/handoff.hpp"
#include "backend/cost.hpp"
#include "backend/text.hpp"
#include "backend/wire.hpp"
#include "bypass_policy.hpp"
#include "compaction.hpp"
#include "dispatch.hpp"
#include "hub.hpp"
#include "lifecycle.hpp"
#include "result.hpp"
#include "result_cache.hpp"
#include "safety.hpp"
#include "session.hpp"
#include "settings.hpp"
#include "sysprompt.hpp"
#include "text_calls.hpp"
#include "verbs.hpp"

namespace ollie {

using json = nlohmann::json;

namespace {

/// A turn that cannot go on: the text of its `error` block.
struct TurnFailed {
  std::string message;
};

bool aborted(const std::system_error& e) { return e.code() == asio::error::operation_aborted; }

/// Why the tool list could not be read, as §8.1.3 and §6.1 word it: a reason that already says
/// what became of the tool server (`tool server lost: …`) stands as it is.
std::string unavailable(const std::string& why) {
  return why.rfind("tool server ", 0) == 0 ? why : "tool server unavailable: " + why;
}

/// What one LLM response brought (§8.1.3 step 5).
struct Response {
  std::string text, reasoning;
  std::vector<backend::ToolCall> calls;
  backend::Usage usage;
  backend::StopReason stop = backend::StopReason::end;
  std::string stop_raw;
  std::vector<std::string> reasoning_items;
  bool text_calls = false;  ///< `calls` were taken from the text (§8.15): ids `text-<call block id>`
};

/// The id of a text-based call until its call block gives it one (§8.15).
constexpr std::string_view TEXT_CALL_PENDING = "text-pending-";

/// Shared between the backend's thread (the sink) and the turn.
struct Pending {
  std::mutex mu;
  bool finished = false;
  std::optional<backend::Error> error;
  Response r;
  std::int64_t input_estimate = 0;  ///< the request's tokens as §8.14 estimates them (§8.5.1: bytes / 4)
  std::shared_ptr<virtfs::Signal> signal = std::make_shared<virtfs::Signal>();
};

/// The retry decision of §8.2 for a failed attempt; nullopt = fail the turn with `why`.
struct Retry {
  int seconds;
  std::string reason;
};

// `server error: 503 <the provider's message>`, the backend's name left out, as the retry block
// says it (§8.2), for an HTTP status and an error event in the stream alike; other transient
// failures (connection, timeouts) as classified.
std::string server_error(const backend::Error& e) {
  if (const auto at = e.message.find("server error: "); at != std::string::npos) return e.message.substr(at);
  return e.http_status < 500 ? e.message : "server error: " + e.message;
}

std::optional<Retry> retry_for(const backend::Error& e, int attempt, std::string& why) {
  using C = backend::ErrorClass;
  const int n = attempt + 1;  // the retry about to be made, 1..3
  switch (e.cls) {
    case C::rate_limit:
      if (e.retry_after_s && *e.retry_after_s > 120) {
        why = "rate limited: retry after " + std::to_string(*e.retry_after_s) + "s exceeds 120s; not retried";
        return std::nullopt;
      }
      if (n > 3) break;
      return Retry{e.retry_after_s ? *e.retry_after_s : 5 << (n - 1), "rate limited"};
    case C::transient:
      if (n > 3) break;
      return Retry{5 << (n - 1), server_error(e)};
    case C::stream_drop:
      if (n > 3) {
        why = "stream dropped (no more retries)";
        return std::nullopt;
      }
      return Retry{2 << (n - 1), "stream dropped"};
    case C::context_overflow:
      why = "context overflow";
      return std::nullopt;
    default:
      break;
  }
  why = e.message;
  return std::nullopt;
}

double table_cost(const std::string& model, const backend::Usage& u) {
  backend::Usage table = u;
  table.cost.reset();
  return backend::cost_of(model, table);
}

bool same_tools(const std::vector<ToolInfo>& a, const std::vector<ToolInfo>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); i++)
    if (a[i].name != b[i].name || a[i].prompt != b[i].prompt || a[i].description != b[i].description ||
        a[i].parameters != b[i].parameters)
      return false;
  return true;
}

/// How old a tool list read during a round may be when the next request takes it.
constexpr std::chrono::milliseconds prefetch_fresh{50};

/// True when running `calls` changes nothing the tool list depends on (§8.3.1's read scope
/// changes no file; the result cache of §8.3.3 counts on it too): every call that runs is a
/// foreground read-scope call, not a bypass.
bool changes_nothing(const std::vector<Call>& calls) {
  return std::all_of(calls.begin(), calls.end(), [](const Call& c) {
    return c.preset || c.unknown || (c.scope == "read" && !c.background && !c.bypass);
  });
}

}  // namespace

/// The state of one running turn.
class Turn {
 public:
  Turn(std::shared_ptr<Agent> a, std::shared_ptr<Session> s) : a_(std::move(a)), s_(std::move(s)) {
    std::lock_guard lock(a_->mu);
    cache_epoch_ = a_->results_epoch;
  }

  asio::awaitable<void> run(Submission sub);
  /// A summary request (§8.5.3 step 4): streamed without blocks, retried as §8.2 says, counted.
  asio::awaitable<p9::Result<std::string>> summarize(backend::ChatRequest req);
  /// The turn's cost so far (the summary requests of `ctl compact` add it to the session's).
  double cost() const { return any_provider_cost_ ? provider_cost_ : table_cost_; }

 private:
  asio::awaitable<std::vector<ToolInfo>> tool_list();
  /// Asks for the next request's tool list while the round's last batch runs, its calls sent
  /// first (toolsrv takes a connection's requests in order). tool_list() takes the answer unless
  /// the session's toolsrv wishes (loads, unloads) changed meanwhile, or it is older than
  /// prefetch_fresh (a `.meta` edited by hand during a long call is seen at the next request).
  void prefetch_tools();
  asio::awaitable<void> render_prompt(const std::vector<ToolInfo>& tools);
  backend::ChatRequest build(const std::vector<ToolInfo>& tools);
  /// The request's messages from the history, and the context estimate (§8.5.1).
  void fill_messages(backend::ChatRequest& req);
  void fill_messages_locked(backend::ChatRequest& req);
  /// §8.1.3 steps 2-3: the cold collapse, then compaction when the estimate reaches the trigger.
  asio::awaitable<void> before_request();
  /// An automatic compaction with this turn's summarizer; true when the history changed.
  asio::awaitable<bool> compact(Trigger why);
  asio::awaitable<Response> stream(backend::ChatRequest req);
  asio::awaitable<Response> attempt(const backend::ChatRequest& req);
  void account(const Response& r);
  /// §8.14 for an attempt that failed or was interrupted: the request counts; when the provider
  /// produced output before it ended, its tokens are estimated (no usage came with it).
  void account_unfinished(Pending& p);
  /// Runs the calls of one response (§8.3); true when every result is an error. `round`: the
  /// calls make a tool round, whose last result carries the pending inject (§8.8); those of a
  /// response the provider stopped run nothing, and the inject waits to be the next prompt.
  asio::awaitable<bool> dispatch(std::vector<Call> calls, bool round);
  /// `last`: the round's last batch, whose last result carries the pending inject (§8.8).
  asio::awaitable<void> run_batch(std::vector<Call>& batch, bool last);
  /// The path stamps of the batch's cacheable calls that would run (§8.3.3), one per call.
  asio::awaitable<std::vector<std::optional<FileStamp>>> stamps(const std::vector<Call>& batch,
                                                                const std::vector<std::size_t>& source);
  void deliver(const Call& c, bool last = false);
  /// After a tool round: the error streak (§8.6) and the plan re-injection (§8.7).
  void after_round(bool all_failed);
  /// A context message: a user message in the history and a `context` block named `name`.
  void add_context(const std::string& name, const std::string& text);
  void interrupted();
  /// §8.15: a response without API calls, its text scanned for calls to the loaded tools; the
  /// assistant block is finalized without them.
  void take_text_calls(Response& r);
  /// §8.15: a text-based call's id becomes `text-<id of its call block>`, in the history too.
  void name_text_call(Call& c, const std::string& block_id);
  /// Once per agent: an `info` block when the system prompt and the tool schemas alone do not fit
  /// the context length (small local models then tend to write their calls as text).
  void note_small_context(const backend::ChatRequest& req);

  std::shared_ptr<Agent> a_;
  std::shared_ptr<Session> s_;
  std::shared_ptr<Pending> current_;  ///< the response streaming now
  bool unavailable_noted_ = false;
  std::optional<std::string> tools_failed_;  ///< why this round has no tool list from toolsrv
  double provider_cost_ = 0, table_cost_ = 0;
  bool any_provider_cost_ = false;
  std::vector<ToolInfo> schemas_for_;      ///< the tool list schemas_ was made from
  std::vector<backend::Tool> schemas_;     ///< its schemas as sent, dispatch flags added
  bool quiet_ = false;                     ///< a summary request streams: no blocks, no history
  bool overflow_compacted_ = false;        ///< §8.2: one compaction per turn for a context overflow
  ResultCache cache_;                      ///< §8.3.3: this turn's results
  std::uint64_t cache_epoch_ = 0;          ///< the agent's results_epoch cache_ belongs to
  int rounds_ = 0, streak_ = 0;            ///< tool rounds of the turn; failed rounds in a row
  std::vector<std::string> loaded_;        ///< the names of the tools of this request
  struct Prefetch {
    std::shared_ptr<p9::Handoff<p9::Result<std::vector<ToolInfo>>>> list;
    std::uint64_t wishes = 0;  ///< the ToolHost's wishes() when it was asked
    std::chrono::steady_clock::time_point asked;
  };
  std::optional<Prefetch> prefetch_;  ///< the next request's tool list, asked during a round
  bool prefetch_due_ = false;         ///< this round's calls can change nothing the list depends on
};

asio::awaitable<void> Agent::run(Submission sub) {
  auto s = session.lock();
  if (!s) co_return;
  Turn t(shared_from_this(), std::move(s));
  co_await t.run(std::move(sub));
}

asio::awaitable<void> Turn::run(Submission sub) {
  Agent& a = *a_;
  a.set_state("thinking");
  bool ready;
  {
    std::lock_guard lock(a.mu);
    ready = a.prompts_ready;
  }
  std::string failure;
  bool interrupt = false;
  if (!ready) {  // a restored agent resolves its prompt entries at its first turn (they may run commands)
    // A stop kills a `!` entry still running (or comes first); the prompt is kept, unanswered.
    try {
      interrupt = !co_await a.resolve_prompts();
    } catch (const std::system_error& e) {
      if (!aborted(e)) throw;
      interrupt = true;
    }
  }
  {
    std::unique_lock lock(a.mu);
    a.turn_open_ = true;
    const bool fresh = a.history.empty();
    const std::string up = a.user_prompts;
    if (fresh && !up.empty()) {
      HistoryMessage m;
      m.msg.role = backend::Role::user;
      m.msg.content = up;
      a.history.push_back(std::move(m));
    }
    HistoryMessage m;
    m.msg.role = backend::Role::user;
    m.msg.content = sub.text;
    a.history.push_back(std::move(m));
    lock.unlock();
    if (fresh && !up.empty()) a.transcript.append(make_block("context", up, "userPrompts"));
  }
  if (!sub.shown) a.transcript.append(make_block("user", sub.text, sub.origin));
  s_->save_soon();  // the turn's start: a restart after a kill -9 says the turn was cut off

  try {
    if (!interrupt) for (;;) {
      auto tools = co_await tool_list();
      loaded_.clear();
      for (const auto& t : tools) loaded_.push_back(t.name);
      co_await render_prompt(tools);
      co_await before_request();
      auto req = build(tools);
      note_small_context(req);
      const backend::GenerationParams params = req.params;
      Response r = co_await stream(std::move(req));
      account(r);
      s_->save_soon(true);  // its usage and the turn's cost so far, before its tool round runs
      // The assistant message: text, calls and the opaque reasoning items (§8.16).
      std::vector<Call> calls;
      {
        std::lock_guard lock(a.mu);
        HistoryMessage m;
        m.msg.role = backend::Role::assistant;
        m.msg.content = r.text;
        m.msg.tool_calls = r.calls;
        m.msg.reasoning = r.reasoning;
        if (!r.calls.empty() && !r.reasoning_items.empty()) {  // §7.7: only what the provider returned
          m.msg.reasoning_items = r.reasoning_items;
          m.msg.reasoning_backend = a.backend_name;
        }
        if (!m.msg.content.empty() || !m.msg.tool_calls.empty()) a.history.push_back(std::move(m));
      }
      if (r.calls.empty()) {
        if (r.stop == backend::StopReason::filtered) failure = "stopped: " + r.stop_raw;
        break;
      }
      std::optional<int> max_tokens = params.max_tokens;  // as sent (§8.2): anthropic always sends one
      {
        std::lock_guard lock(a.mu);
        if (a.backend_) max_tokens = a.backend_->max_tokens_sent(params);
      }
      const std::string cwd = a.effective_cwd();
      std::optional<std::vector<ToolInfo>> catalog;
      for (auto& tc : r.calls) {
        Call c = make_call(tc, cwd, tools);
        if (c.unknown && !c.preset && !catalog && !tools_failed_) {
          auto cat = co_await s_->host->catalog();
          if (cat) catalog = std::move(*cat);
          else tools_failed_ = cat.ename();
        }
        // Without a tool list from toolsrv, no call is known to be unknown (§6.1).
        if (c.unknown && !c.preset)
          c.preset = tools_failed_ ? "error: " + unavailable(*tools_failed_) : unknown_tool(c.name, *catalog);
        if (r.stop == backend::StopReason::filtered) {
          c.preset = "error: stopped: " + r.stop_raw;
        } else if (r.stop == backend::StopReason::length && (!c.args_json || tc.arguments.empty())) {
          // No byte of the arguments came (make_call reads none as {}): cut off too.
          c.preset = "error: arguments cut off at the output token limit (maxTokens=" +
                     (max_tokens ? std::to_string(*max_tokens) : std::string("unset")) + ")";
        }
        calls.push_back(std::move(c));
      }
      prefetch_due_ = changes_nothing(calls);
      const bool all_failed = co_await dispatch(std::move(calls), r.stop != backend::StopReason::filtered);
      if (r.stop == backend::StopReason::filtered) {
        s_->save_soon();
        failure = "stopped: " + r.stop_raw;
        break;
      }
      after_round(all_failed);
      s_->save_soon(true);
      a.set_state("thinking");
    }
  } catch (const TurnFailed& f) {
    failure = f.message;
  } catch (const std::system_error& e) {
    if (!aborted(e)) throw;
    interrupt = true;
  }
  if (interrupt && current_) account_unfinished(*current_);
  if (interrupt && current_ && !quiet_) {
    // §8.9: an interrupted stream's partial text is kept as the assistant message, without calls.
    std::string text;
    {
      std::lock_guard lock(current_->mu);
      text = current_->r.text;
    }
    if (!text.empty()) {
      HistoryMessage m;
      m.msg.role = backend::Role::assistant;
      m.msg.content = std::move(text);
      std::lock_guard lock(a.mu);
      a.history.push_back(std::move(m));
    }
  }
  current_.reset();
  a.transcript.finish_stream();
  if (interrupt) interrupted();
  if (!failure.empty()) a.transcript.append(make_block("error", failure));
  if (interrupt || !failure.empty()) {
    std::lock_guard lock(a.mu);
    unsend_unanswered(a.history);  // §8.4: verbatim in one request a model answered
  }
  {
    std::lock_guard lock(a.mu);
    auto& t = a.stats.totals;
    t.cost_last = (any_provider_cost_ ? provider_cost_ : table_cost_) + std::exchange(a.rolled_cost_, 0.0);  // §8.10.3
    if (sub.end) {
      sub.end->interrupted = interrupt;
      sub.end->failure = failure;
      // The last message is this turn's final answer, unless the turn ended on calls or kept
      // no message for an empty answer (providers refuse empty ones): then the answer is "".
      if (const auto& h = a.history; !h.empty() && h.back().msg.role == backend::Role::assistant &&
                                     h.back().msg.tool_calls.empty())
        sub.end->answer = h.back().msg.content;
      sub.end->ended = true;
    }
    t.cost_session += t.cost_last;
    a.turn_open_ = false;
    a.turn_cost_ = 0;
  }
  // A turn that ended by itself is saved before it says `idle`: a kill -9 the moment after keeps
  // its answer in the history, and no restore calls it cut off. A stopped one says `idle` at once
  // (§8.9's 100 ms) and is saved just after, as is a sub-agent's (never persisted, §7.7).
  bool saved = false;
  if (!interrupt && !a.subagent) {
    try {
      const p9::Status st = co_await save_now(a.hub, s_);  // failed: logged, tried again below
      saved = st.ok();
    } catch (const std::system_error& e) {  // a stop that came at the end
      if (!aborted(e)) throw;
    }
  }
  {
    std::lock_guard lock(a.mu);
    // Idle from here on when nothing is queued, so an idle-only verb right after the `idle`
    // state is accepted; a submission arriving now waits for this turn's end (start_next).
    a.requeue_inject();  // §8.8: no round took it, so it is the next prompt
    if (a.queue_.empty()) a.running_ = false;
  }
  a.set_state("idle");
  if (!saved) s_->save_soon();
}

// §8.9: the partial text of an interrupted stream is kept as the assistant message without calls;
// calls without results go, with their entries in the assistant message; an assistant message
// left with neither text nor calls goes.
void Turn::interrupted() {
  Agent& a = *a_;
  {
    std::lock_guard lock(a.mu);
    drop_unanswered(a.history);
  }
  a.transcript.append(make_block("info", "interrupted"));
}

void Turn::prefetch_tools() {
  auto list = std::make_shared<p9::Handoff<p9::Result<std::vector<ToolInfo>>>>();
  prefetch_ = Prefetch{list, s_->host->wishes(), std::chrono::steady_clock::now()};
  auto read = [](std::shared_ptr<ToolHost> host, std::string agent, decltype(list) into) -> asio::awaitable<void> {
    try {
      into->set(co_await host->tools(std::move(agent)));
    } catch (const std::exception& e) {
      into->set(p9::error(e.what()));
    }
  };
  asio::co_spawn(a_->ex, read(s_->host, a_->id, std::move(list)), asio::detached);
}

asio::awaitable<std::vector<ToolInfo>> Turn::tool_list() {
  Agent& a = *a_;
  std::optional<p9::Result<std::vector<ToolInfo>>> got;
  if (auto p = std::exchange(prefetch_, std::nullopt)) {
    auto listed = co_await p->list->get();
    if (listed && s_->host->wishes() == p->wishes && std::chrono::steady_clock::now() - p->asked < prefetch_fresh)
      got = std::move(listed);
  }
  if (!got) got = co_await s_->host->tools(a.id);
  auto& r = *got;
  std::lock_guard lock(a.mu);
  tools_failed_.reset();
  if (!r) {
    tools_failed_ = r.ename();
    if (!unavailable_noted_) {
      unavailable_noted_ = true;
      a.transcript.append(make_block("error", unavailable(r.ename())));
    }
    co_return a.last_tools;
  }
  co_return std::move(*r);
}

namespace {

// §7.6: re-rendered when the tool list differs from the one last used, or when due.
asio::awaitable<void> render_for(const std::shared_ptr<Agent>& ap, const std::shared_ptr<Session>& s,
                                 const std::vector<ToolInfo>& tools) {
  Agent& a = *ap;
  {
    std::lock_guard lock(a.mu);
    if (!a.render_due && same_tools(tools, a.last_tools)) co_return;
  }
  SystemPromptParts p;
  p.platform = "unknown";  // §7.6: toolsrv's to say; without it, rendered again at the next request
  auto info = co_await s->host->info(a.id);
  if (info) {
    auto get = [&](const char* k) { auto it = info->find(k); return it == info->end() ? std::string() : it->second; };
    p.platform = get("os") + "/" + get("arch");
    p.git = get("git") == "true";
  }
  p.cwd = a.effective_cwd();
  {
    std::lock_guard lock(s->mu);
    p.session_name = s->name;
  }
  p.session_id = s->id;
  std::lock_guard lock(a.mu);
  p.system = a.system_text;
  p.agent_name = a.name;
  p.agent_id = a.id;
  p.agent = a.agent_text;
  p.tools = tools;
  a.system_prompt = render_system_prompt(p);
  a.last_tools = tools;
  a.render_due = !info;
}

}  // namespace

asio::awaitable<void> Turn::render_prompt(const std::vector<ToolInfo>& tools) { co_await render_for(a_, s_, tools); }

asio::awaitable<std::string> system_prompt(std::shared_ptr<Agent> a, std::shared_ptr<Session> s) {
  bool ready;
  {
    std::lock_guard lock(a->mu);
    ready = a->prompts_ready;
  }
  if (!ready) co_await a->resolve_prompts();  // a restored agent's entries, at their first use
  std::vector<ToolInfo> tools;
  if (auto r = co_await s->host->tools(a->id)) tools = std::move(*r);
  else {
    std::lock_guard lock(a->mu);
    tools = a->last_tools;
  }
  co_await render_for(a, s, tools);
  std::lock_guard lock(a->mu);
  co_return a->system_prompt;
}

backend::ChatRequest Turn::build(const std::vector<ToolInfo>& tools) {
  Agent& a = *a_;
  backend::ChatRequest req;
  std::lock_guard lock(a.mu);
  req.system = a.system_prompt;
  req.model = a.model;
  req.params = to_generation_params(merge_params(a.profile.params, a.overrides));
  if (!same_tools(tools, schemas_for_)) {  // the schemas with dispatch flags, made once per tool list
    schemas_.clear();
    for (const auto& t : tools) schemas_.push_back({t.name, t.description, with_dispatch_flags(t.parameters)});
    schemas_for_ = tools;
  }
  req.tools = schemas_;
  fill_messages_locked(req);
  return req;
}

void Turn::fill_messages(backend::ChatRequest& req) {
  std::lock_guard lock(a_->mu);
  fill_messages_locked(req);
}

void Turn::fill_messages_locked(backend::ChatRequest& req) {
  Agent& a = *a_;
  req.messages.clear();
  req.messages.reserve(a.history.size());
  for (auto& m : a.history) {
    req.messages.push_back(m.msg);
    m.sent = true;  // §8.4: a cold result is verbatim in this request, collapsed in the next
  }
}

asio::awaitable<void> Turn::before_request() {
  Agent& a = *a_;
  // At most a while: a models endpoint that stalls or fails must not stretch the retry waits
  // §8.2 announces (a failed ask is asked again after 30 s, at a retry's request).
  const int context = co_await Compaction::context_length(a_, Compaction::ask_patience);
  bool over;
  {
    std::lock_guard lock(a.mu);
    collapse_sent(a.history);  // §8.4
    over = over_trigger(estimate_tokens(a.system_prompt.size(), a.history), context, a.profile.compact_at);
  }
  if (over) co_await compact(Trigger::threshold);
}

asio::awaitable<bool> Turn::compact(Trigger why) {
  auto summarizer = [this](backend::ChatRequest req) { return summarize(std::move(req)); };
  auto r = co_await Compaction::run(a_, s_, why, summarizer);
  co_return r && r->changed;
}

asio::awaitable<p9::Result<std::string>> Turn::summarize(backend::ChatRequest req) {
  quiet_ = true;
  std::string failed;
  try {
    Response r = co_await stream(std::move(req));
    account(r);
    quiet_ = false;
    co_return std::move(r.text);
  } catch (const TurnFailed& f) {
    failed = f.message;
  }
  quiet_ = false;
  co_return p9::error(failed);
}

asio::awaitable<p9::Result<std::string>> summarize(std::shared_ptr<Agent> a, std::shared_ptr<Session> s,
                                                   backend::ChatRequest req) {
  Turn t(a, std::move(s));
  auto r = co_await t.summarize(std::move(req));
  std::lock_guard lock(a->mu);
  a->stats.totals.cost_session += t.cost();
  co_return r;
}

asio::awaitable<Response> Turn::stream(backend::ChatRequest req) {
  Agent& a = *a_;
  if (a.subagent) {  // a sub-agent asks no more once its turn tree spent the budget
    const auto budget = a.hub.conf().subagents.budget;
    const auto spent = a.tree->tokens.load();
    if (budget > 0 && spent >= budget)
      throw TurnFailed{"turn budget exhausted: " + std::to_string(spent) + " tokens spent of " + std::to_string(budget)};
  }
  const char* busy = quiet_ ? "compacting" : "thinking";
  for (int attempt = 0;; attempt++) {
    std::optional<backend::Error> failed;
    try {
      co_return co_await this->attempt(req);
    } catch (const backend::Error& e) {
      failed = e;  // handled below: no co_await inside a handler
    }
    // §8.2: a context overflow compacts once per turn and resends, within the request's 3 retries.
    if (failed->cls == backend::ErrorClass::context_overflow && !quiet_ && !overflow_compacted_ && attempt < 3) {
      overflow_compacted_ = true;
      if (co_await compact(Trigger::overflow)) {
        fill_messages(req);
        a.set_state(busy);
        continue;
      }
    }
    std::string why;
    auto retry = retry_for(*failed, attempt, why);
    if (!retry) throw TurnFailed{why};
    a.set_state("retrying");
    a.transcript.append(make_block("retry", "retrying in " + std::to_string(retry->seconds) + "s (attempt " +
                                                std::to_string(attempt + 1) + "/3): " + retry->reason));
    asio::steady_timer t(co_await asio::this_coro::executor, a.hub.retry_unit * retry->seconds);
    co_await t.async_wait(asio::use_awaitable);
    a.set_state(busy);
  }
}

// One LLM request: deltas reach the transcript from the backend's thread as they arrive; the
// turn waits for the terminal event. Destroying the Stream (cancellation) aborts the transfer.
asio::awaitable<Response> Turn::attempt(const backend::ChatRequest& req) {
  Agent& a = *a_;
  std::shared_ptr<backend::Backend> be;
  {
    std::lock_guard lock(a.mu);
    be = a.backend_;
  }
  if (!be) {  // not made at restore (a key missing then): made now, or the reason it cannot be
    if (auto st = a.make_backend(); !st) throw TurnFailed{st.ename()};  // names the backend
    std::lock_guard lock(a.mu);
    be = a.backend_;
  }
  co_await Compaction::context_length(a_, Compaction::ask_patience);
  auto p = std::make_shared<Pending>();
  p->input_estimate = static_cast<std::int64_t>(backend::request_bytes(req) / 4);  // as the backends estimate
  current_ = p;
  auto self = a_;
  const bool shown = !quiet_;  // a summary request's text is not a reply: no blocks
  auto sink = [p, self, shown](backend::StreamEvent ev) {
    using K = backend::StreamEvent::Kind;
    switch (ev.kind) {
      case K::content:
        if (shown) self->transcript.stream("assistant", ev.text);
        {
          std::lock_guard lock(p->mu);
          p->r.text += ev.text;
        }
        return;
      case K::reasoning:
        if (shown) self->transcript.stream("reasoning", ev.text);
        {
          std::lock_guard lock(p->mu);
          p->r.reasoning += ev.text;
        }
        return;
      case K::tool_call: {
        std::lock_guard lock(p->mu);
        p->r.calls.push_back(std::move(ev.call));
        return;
      }
      case K::done: {
        std::lock_guard lock(p->mu);
        p->r.usage = ev.usage;
        p->r.stop = ev.stop;
        p->r.stop_raw = ev.stop_raw;
        p->r.reasoning_items = std::move(ev.reasoning_items);
        p->finished = true;
        break;
      }
      case K::error: {
        std::lock_guard lock(p->mu);
        p->error = std::move(ev.error);
        p->finished = true;
        break;
      }
    }
    p->signal->notify();
  };
  auto st = be->stream(req, sink);
  if (!st) throw TurnFailed{st.error().message};
  backend::Stream transfer = std::move(*st);
  for (;;) {
    const auto seen = p->signal->version();
    {
      std::lock_guard lock(p->mu);
      if (p->finished) break;
    }
    co_await p->signal->wait(seen);
  }
  transfer.cancel();
  // The blocks streamed so far are final, whether the response succeeded or not (§8.2: after a
  // drop the retried response gets new blocks).
  current_.reset();
  std::unique_lock lock(p->mu);
  if (p->error) {
    // Whatever a failed attempt streamed is not part of the history; tokens it cost still count.
    lock.unlock();
    account_unfinished(*p);
    a.transcript.finish_stream();
    throw *p->error;
  }
  Response r = std::move(p->r);
  lock.unlock();
  if (shown) take_text_calls(r);  // finalizes the assistant block
  else a.transcript.finish_stream();
  co_return r;
}

void Turn::take_text_calls(Response& r) {
  if (!r.calls.empty() || loaded_.empty()) {
    a_->transcript.finish_stream();
    return;
  }
  auto found = extract_text_calls(r.text, loaded_);
  if (found.calls.empty()) {
    a_->transcript.finish_stream();
    return;
  }
  for (std::size_t i = 0; i < found.calls.size(); i++) found.calls[i].id = std::string(TEXT_CALL_PENDING) + std::to_string(i);
  r.text = std::move(found.text);
  r.calls = std::move(found.calls);
  r.text_calls = true;
  a_->transcript.finish_stream(r.text);
}

void Turn::name_text_call(Call& c, const std::string& block_id) {
  if (!c.id.starts_with(TEXT_CALL_PENDING)) return;
  const std::string id = "text-" + block_id;
  std::lock_guard lock(a_->mu);
  for (auto m = a_->history.rbegin(); m != a_->history.rend(); ++m) {
    if (m->msg.role != backend::Role::assistant) continue;
    for (auto& tc : m->msg.tool_calls)
      if (tc.id == c.id) tc.id = id;
    break;
  }
  c.id = id;
}

void Turn::note_small_context(const backend::ChatRequest& req) {
  Agent& a = *a_;
  std::size_t bytes = req.system.size();  // estimated as §8.5.1 does: bytes / 4
  for (const auto& t : req.tools) bytes += t.name.size() + t.description.size() + t.parameters.size();
  const auto tokens = static_cast<std::int64_t>(bytes / 4);
  std::string text;
  {
    std::lock_guard lock(a.mu);
    const int context = a.stats.context_length;
    if (context <= 0 || tokens < context || a.small_context_noted) return;
    a.small_context_noted = true;
    text = "context length " + std::to_string(context) + " is too small for the system prompt and tools (~" +
           std::to_string(tokens) + " tokens): the model may answer tool calls as text";
    if (a.backend_name == "ollama") text += "; raise [ollama] num_ctx in backends.conf";
  }
  a.transcript.append(make_block("info", text));
}

void Turn::account_unfinished(Pending& p) {
  Response r;
  {
    std::lock_guard lock(p.mu);
    std::size_t out = p.r.text.size() + p.r.reasoning.size();
    for (const auto& c : p.r.calls) out += c.name.size() + c.arguments.size();
    r.usage.requests = 1;
    if (out > 0) {
      r.usage.input = p.input_estimate;
      r.usage.output = static_cast<std::int64_t>(out / 4);
      r.usage.estimated = true;
    }
  }
  account(r);
}

void Turn::account(const Response& r) {
  Agent& a = *a_;
  std::lock_guard lock(a.mu);
  auto& t = a.stats.totals;
  t.input += r.usage.input;
  t.output += r.usage.output;
  t.cached_input += r.usage.cached_input;
  t.cache_creation += r.usage.cache_creation;
  t.requests += r.usage.requests > 0 ? r.usage.requests : 1;
  t.estimated = t.estimated || r.usage.estimated;
  a.tree->tokens += r.usage.input + r.usage.output;
  if (r.usage.cost) {
    any_provider_cost_ = true;
    provider_cost_ += *r.usage.cost;
  }
  table_cost_ += table_cost(a.model, r.usage);
  if (a.turn_open_) a.turn_cost_ = cost();  // saved with the turn's mark: a restore ends the turn (§8.14)
}

// §8.3.1: batches in order; the calls of a batch concurrently; results in call order.
asio::awaitable<bool> Turn::dispatch(std::vector<Call> calls, bool round) {
  bool all_failed = true;
  auto batches = split_batches(std::move(calls));
  for (auto& batch : batches) {
    for (auto& c : batch) name_text_call(c, a_->transcript.append(make_block("call", c.block_args, c.name)).id);
    std::vector<std::string> names;
    // Escaped: a name is the model's text, and a state is one line (statewait, agent/idx, events).
    // Cut, as is the line: an unknown tool's name can be megabytes, and each reader of `event`
    // holds up to 1000 lines (§5.3).
    for (const auto& c : batch)
      if (auto n = backend::clip(bypass::escape(c.name), 64); std::find(names.begin(), names.end(), n) == names.end())
        names.push_back(n);
    // A batch none of whose calls runs (unknown tools, a response the provider stopped: §8.2)
    // executes nothing: the state stays.
    if (std::any_of(batch.begin(), batch.end(), [](const Call& c) { return !c.preset; })) {
      std::string state = "calling: ";
      for (std::size_t i = 0; i < names.size(); i++) {
        if (i && state.size() + names[i].size() > 512) {
          state += ", ...";
          break;
        }
        state += (i ? ", " : "") + names[i];
      }
      a_->set_state(state);
    }
    co_await run_batch(batch, round && &batch == &batches.back());
    for (const auto& c : batch) a_->note_sandbox(*c.result);  // after the batch's tool blocks
    bool wrote = false;
    for (const auto& c : batch) {
      all_failed = all_failed && c.result->error;
      if (c.preset) continue;  // ran nothing
      // §8.3.3: what the batch may have changed is no longer known.
      if (c.scope == "global") cache_.clear();
      else if (c.scope == "write") cache_.drop_path(c.path);
      wrote = wrote || c.scope != "read";
    }
    // The session's other agents (a sub-agent's parent among them) share the files.
    if (wrote) s_->drop_results(a_.get());
  }
  co_return all_failed;
}

void Turn::add_context(const std::string& name, const std::string& text) {
  Agent& a = *a_;
  {
    std::lock_guard lock(a.mu);
    HistoryMessage m;
    m.msg.role = backend::Role::user;
    m.msg.content = text;
    a.history.push_back(std::move(m));
  }
  a.transcript.append(make_block("context", text, name));
}

void Turn::after_round(bool all_failed) {
  rounds_++;
  streak_ = all_failed ? streak_ + 1 : 0;
  if (streak_ == NUDGE_STREAK) add_context("nudge", NUDGE_TEXT);
  if (streak_ >= ABORT_STREAK) throw TurnFailed{ABORT_TEXT};
  if (rounds_ % PLAN_EVERY != 0) return;
  std::string plan;
  {
    std::lock_guard lock(a_->mu);
    plan = a_->plan;
  }
  if (auto text = plan_reminder(plan); !text.empty()) add_context("plan", text);
}

void Turn::deliver(const Call& c, bool last) {
  Agent& a = *a_;
  std::string content = c.result->text;
  {
    std::lock_guard lock(a.mu);
    // §8.8: the round's last result carries the pending inject; the block shows what the model gets.
    const std::string inject = last ? a.take_inject() : std::string();
    content += inject;
    HistoryMessage m;
    m.msg.role = backend::Role::tool;
    m.msg.tool_call_id = c.id;
    m.msg.content = content;
    m.tool_name = c.name;
    m.tier = c.tier;
    m.failed = c.result->error;
    m.inject = inject.size();
    a.history.push_back(std::move(m));
  }
  a.transcript.append(make_block("tool", content, c.name, c.format));
}

namespace {

/// The calls of a batch running at once; each child coroutine reports here.
struct Join {
  std::size_t left = 0;
  std::shared_ptr<virtfs::Signal> signal = std::make_shared<virtfs::Signal>();
  std::vector<std::shared_ptr<asio::cancellation_signal>> cancels;
  /// Calls that have asked toolsrv and not had their answer yet: at most max_running, the others
  /// wait their turn. A response of a thousand calls would otherwise ask toolsrv a thousand
  /// times at once, past what one connection has in flight (`too many requests in flight`).
  std::shared_ptr<virtfs::Gate> running = std::make_shared<virtfs::Gate>();
  static constexpr std::size_t max_running = 64;
};

}  // namespace

asio::awaitable<std::vector<std::optional<FileStamp>>> Turn::stamps(const std::vector<Call>& batch,
                                                                    const std::vector<std::size_t>& source) {
  std::vector<std::optional<FileStamp>> out(batch.size());
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < batch.size(); i++)
    if (source[i] == i && cacheable(batch[i]) && !batch[i].path.empty() &&
        std::find(paths.begin(), paths.end(), batch[i].path) == paths.end())
      paths.push_back(batch[i].path);
  if (paths.empty()) co_return out;
  auto r = co_await s_->host->stat(a_->id, paths);
  if (!r) co_return out;  // unknown: nothing is served from the cache or stored in it
  for (std::size_t i = 0; i < batch.size(); i++) {
    if (batch[i].path.empty()) continue;
    if (auto at = std::find(paths.begin(), paths.end(), batch[i].path); at != paths.end()) out[i] = (*r)[at - paths.begin()];
  }
  co_return out;
}

asio::awaitable<void> Turn::run_batch(std::vector<Call>& batch, bool last) {
  Agent& a = *a_;
  auto ex = co_await asio::this_coro::executor;
  auto join = std::make_shared<Join>();
  const std::size_t n = batch.size();
  auto outcomes = std::make_shared<std::vector<std::optional<ToolOutcome>>>(n);
  // §8.3.2: a cacheable call that repeats an earlier one of the batch takes that one's result.
  std::vector<std::string> keys(n);
  std::vector<std::size_t> source(n);
  for (std::size_t i = 0; i < n; i++) {
    source[i] = i;
    if (!cacheable(batch[i])) continue;
    keys[i] = dedupe_key(batch[i]);
    for (std::size_t j = 0; j < i; j++)
      if (keys[j] == keys[i]) {
        source[i] = j;
        break;
      }
  }
  // §8.3.3: a hit is served when its path's stamp is unchanged; a miss that succeeds is stored
  // with the stamp taken before it ran.
  const auto stamp = co_await stamps(batch, source);
  {
    std::lock_guard lock(a_->mu);
    if (a_->results_epoch != cache_epoch_) {  // a session `invalidate` since (§3.2): serve nothing kept
      cache_epoch_ = a_->results_epoch;
      cache_.clear();
    }
  }
  std::vector<bool> store(n, false);
  for (std::size_t i = 0; i < n; i++) {
    if (batch[i].preset) {
      (*outcomes)[i] = ToolOutcome{cut_result(*batch[i].preset), true};  // §8.3.4: it may quote the model at length
      continue;
    }
    if (source[i] != i) continue;
    if (cacheable(batch[i]) && (batch[i].path.empty() || stamp[i]) && s_->background_running.load() == 0) {
      const auto* hit = cache_.find(keys[i]);
      if (hit && hit->path == batch[i].path && (hit->path.empty() || hit->stamp == *stamp[i])) {
        (*outcomes)[i] = hit->result;
        continue;
      }
      store[i] = true;
    }
    join->left++;
    auto cancel = std::make_shared<asio::cancellation_signal>();
    join->cancels.push_back(cancel);
    ToolCallRequest req{batch[i].name, a.id, a.secret, batch[i].args, batch[i].timeout, batch[i].bypass};
    auto host = s_->host;
    auto agent = batch[i].background ? a_ : nullptr;  // proc/new.bg (§6.10)
    // A background call takes no lock (§6.7); §4.2 refuses sub-agents while a lock is held.
    auto locking = !batch[i].background && batch[i].scope != "read" ? a_ : nullptr;
    if (locking) locking->locking_calls++;
    asio::co_spawn(
        ex,
        [host, agent, req, outcomes, i, join]() -> asio::awaitable<void> {
          auto place = co_await join->running->enter(Join::max_running);  // §8.3.1: concurrently
          if (agent) (*outcomes)[i] = co_await start_background(agent, req);
          else (*outcomes)[i] = co_await host->call(req);
        },
        asio::bind_cancellation_slot(cancel->slot(), [join, locking](std::exception_ptr) {
          if (locking) locking->locking_calls--;
          join->left--;
          join->signal->notify();
        }));
  }
  if (last && std::exchange(prefetch_due_, false)) prefetch_tools();
  std::size_t delivered = 0;
  try {
    for (;;) {
      const auto seen = join->signal->version();
      while (delivered < n && (*outcomes)[source[delivered]]) {
        auto& c = batch[delivered];
        c.result = *(*outcomes)[source[delivered]];
        if (store[delivered] && !c.result->error)
          cache_.put(keys[delivered], {*c.result, c.path, stamp[delivered].value_or(FileStamp{}), c.within});
        deliver(c, last && delivered + 1 == n);
        delivered++;
      }
      if (delivered == n) break;
      co_await join->signal->wait(seen);
    }
  } catch (const std::system_error& e) {
    // Interrupted: the results already in stay, in call order, even behind a call still
    // running (§8.9); every running call is flushed (its process group killed by toolsrv).
    for (std::size_t i = delivered; i < n; i++)
      if ((*outcomes)[source[i]]) {
        batch[i].result = *(*outcomes)[source[i]];
        deliver(batch[i]);
      }
    for (auto& c : join->cancels) c->emit(asio::cancellation_type::terminal);
    throw;
  }
}

}  // namespace ollie
