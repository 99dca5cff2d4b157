#include "agent.hpp"

#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <ctime>

#include "compaction.hpp"
#include "containment.hpp"
#include "eventfd.hpp"
#include "hub.hpp"
#include "ids.hpp"
#include "off_io.hpp"
#include "session.hpp"
#include "settings.hpp"
#include "sysprompt.hpp"

namespace ollie {

namespace {

std::string money(double usd) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", usd);
  return b;
}

}  // namespace

Agent::Agent(Hub& h, std::shared_ptr<Session> s, std::string agent_id, asio::any_io_executor e)
    : hub(h), session(s), id(std::move(agent_id)), secret(new_secret()), ex(std::move(e)), transcript(s->id, id) {
  created = std::time(nullptr);
  // Every finalized block goes to <agent id>.blocks.jsonl as it is finalized (§7.7).
  transcript.on_final = [&store = hub.store, sid = s->id, aid = id](const Block& b) {
    if (auto st = store.append_block(sid, aid, b.json()); !st) spdlog::error("agent {}: block not saved: {}", aid, st.ename());
  };
}

Agent::~Agent() = default;

std::string Agent::state() const {
  std::lock_guard lock(mu);
  return state_;
}

bool Agent::running() const {
  std::lock_guard lock(mu);
  return running_;
}

void Agent::set_state(const std::string& s) {
  {
    std::lock_guard lock(mu);
    if (state_ == s) return;
    state_ = s;
    state_changed = std::time(nullptr);
    if (killed) return;  // its kill is published: nothing of it follows (§5)
  }
  state_signal_->notify();
  hub.bus.publish("agent." + id + ".state", s);
}

std::string Agent::effective_cwd() const {
  std::lock_guard lock(mu);
  if (!cwd_override.empty()) return cwd_override;
  auto s = session.lock();
  return s ? s->cwd : "";
}

std::string Agent::stats_text() const {
  std::lock_guard lock(mu);
  const auto& t = stats.totals;
  const std::int64_t len = stats.context_length > 0 ? stats.context_length : 128000;
  std::string out;
  out += "input=" + std::to_string(t.input) + "\n";
  out += "output=" + std::to_string(t.output) + "\n";
  out += "cachedInput=" + std::to_string(t.cached_input) + "\n";
  out += "cacheCreation=" + std::to_string(t.cache_creation) + "\n";
  out += "requests=" + std::to_string(t.requests) + "\n";
  out += std::string("estimated=") + (t.estimated ? "true" : "false") + "\n";
  // §8.5.1, as of now; before a restored agent's prompt is rendered again, the size it had
  const std::int64_t tokens = estimate_tokens(prompt_bytes(), history);
  out += "contextTokens=" + std::to_string(tokens) + "\n";
  out += "contextLength=" + std::to_string(len) + "\n";
  out += "contextPercent=" + std::to_string(tokens * 100 / len) + "\n";
  out += "costLast=" + money(t.cost_last) + "\n";
  out += "costSession=" + money(t.cost_session) + "\n";
  return out;
}

std::string Agent::cfg_text() const {
  std::lock_guard lock(mu);
  return render_cfg({backend_name, model, profile.name, cwd_override, merge_params(profile.params, overrides)});
}

AgentRecord Agent::record() const {
  std::lock_guard lock(mu);
  AgentRecord r;
  r.id = id;
  r.name = name;
  r.profile = profile.name;
  r.parent = parent;
  r.turn = turn_open_;
  if (turn_open_) r.turn_cost = turn_cost_ + rolled_cost_;
  r.created = created;
  r.backend = backend_name;
  r.model = model;
  r.cwd = cwd_override;
  r.params = overrides;
  r.tools = tools;
  r.plan = plan;
  r.peers = peers;
  r.feed = feed;
  r.block_counter = transcript.counter();
  r.system_prompt_bytes = prompt_bytes();
  r.usage = stats.totals;
  r.messages = history;
  return r;
}

p9::Status Agent::make_backend() {
  std::string b, m;
  {
    std::lock_guard lock(mu);
    b = backend_name;
    m = model;
  }
  auto be = build_backend(b, m);
  if (!be) return be.error();
  std::lock_guard lock(mu);
  if (model.empty()) model = (*be)->model();
  stats.context_length = (*be)->known_context_length().value_or(0);  // 0: asked at the next request
  backend_ = std::move(*be);
  return {};
}

asio::awaitable<bool> Agent::resolve_prompts() {
  const auto ctx = prompt_context();
  bool commands;
  {
    std::lock_guard lock(mu);
    commands = runs_commands(profile.prompt, ctx) || runs_commands(profile.user_prompts, ctx);
  }
  // Entries that run commands (30 s each at most) resolve on the pool kept for them, so that
  // they hold no other agent's creation, no save and no stop; the others only read files. A
  // flush of the request (agent/new, cfg, invalidate) or a stop of the turn kills the command
  // still running: the Rflush and the stop would otherwise wait for it.
  auto cancel = std::make_shared<EventFd>();
  {
    std::lock_guard lock(mu);
    if (killed) co_return false;
    resolving_ = cancel;  // a kill ends it too (§8.9)
  }
  auto work = [self = shared_from_this(), cancel] { self->resolve_prompts_now(cancel->fd); };
  std::function<void()> hurry = [cancel] { cancel->raise(); };  // named: see off_io
  bool done = true;
  try {
    co_await off_io_cancellable<void>(commands ? hub.commands : hub.blocking, work, hurry);
  } catch (const std::system_error& e) {
    if (e.code() != asio::error::operation_aborted) throw;
    done = false;
  }
  std::lock_guard lock(mu);
  if (resolving_ == cancel) resolving_.reset();
  co_return done;
}

PromptContext Agent::prompt_context() const {
  auto s = session.lock();
  return {hub.config_root, hub.env, s ? s->id : "", id, effective_cwd(), hub.stop_fd.fd, -1,
          backend::secret_variables(hub.conf())};
}

void Agent::resolve_prompts_now(int cancel_fd) {
  auto ctx = prompt_context();
  ctx.cancel_fd = cancel_fd;
  std::vector<std::string> prompt, user;
  {
    std::lock_guard lock(mu);
    prompt = profile.prompt;
    user = profile.user_prompts;
  }
  std::string system_file;
  {
    std::lock_guard lock(mu);
    system_file = profile.system_prompt;
  }
  auto a = resolve_entries(prompt, ctx);
  auto u = resolve_entries(user, ctx);
  // systemPrompt is a path, never a command; an empty file is an empty System section (§7.5).
  const ResolvedText sys = resolve_system_prompt(system_file, ctx);
  if (a.ended || u.ended) {  // the stop or a cancel: the entries stay due, the last text stays
    std::lock_guard lock(mu);
    prompts_ready = false;
    return;
  }
  {
    std::lock_guard lock(mu);
    system_text = sys.text;
    agent_text = a.text;
    user_prompts = u.text;
    prompts_ready = true;
    render_due = true;
  }
  for (const auto& w : sys.warnings) note("info", w);
  for (const auto& w : a.warnings) note("info", w);
  for (const auto& w : u.warnings) note("info", w);
}

void Agent::note(const std::string& role, const std::string& text) { transcript.append(make_block(role, text)); }

void Agent::note_sandbox(const ToolOutcome& r) {
  const std::string dir = effective_cwd();  // where the call ran, and looked for the override
  // The config root in the cwd (a session in $HOME): the sandbox lets a tool rewrite the files
  // that make the sandbox and the bypass policy, so it is the model's to widen. Said once.
  const auto s = session.lock();
  const bool config_writable = s && s->remote.empty() && !dir.empty() && at_or_below(hub.config_root, dir);
  // So with the data root: the saved histories and logs are the tools' to rewrite, and a link
  // planted in place of a directory there leads olliesrv's next save wherever it points.
  const bool data_writable = s && s->remote.empty() && !dir.empty() && at_or_below(hub.data_root, dir);
  if (r.override_ignored.empty() && !r.unconfined && !config_writable && !data_writable) return;
  std::vector<std::string> notes;
  {
    std::lock_guard lock(mu);
    if (config_writable && sandbox_noted.insert("config").second)
      notes.push_back("warning: the working directory " + dir + " holds the config root " + hub.config_root +
                      ": tools can rewrite sandbox.yaml, bypass.policy and the agent profiles, and so widen their own sandbox");
    if (data_writable && sandbox_noted.insert("data").second)
      notes.push_back("warning: the working directory " + dir + " holds the data root " + hub.data_root +
                      ": tools can rewrite the saved sessions, and links they plant there redirect what olliesrv writes");
    if (!r.override_ignored.empty() && sandbox_noted.insert("override " + r.override_ignored).second) {
      const std::string& hex = r.override_ignored;
      notes.push_back("project sandbox override " + dir + "/.ollie-sandbox.yaml ignored: not approved (sha256 " + hex +
                      "); add \"sandbox " + hex + " " + dir + "\" to bypass/policy to approve");
    }
    if (r.unconfined && sandbox_noted.insert("unconfined").second)
      notes.push_back("warning: no Landlock on the tool host; tools run unconfined (best_effort)");
  }
  for (const auto& n : notes) note("info", n);
}

namespace {

/// What a turn added to the totals: `now - before`, field by field (cost: cost_session's).
UsageRecord minus(const UsageRecord& now, const UsageRecord& before) {
  UsageRecord d;
  d.input = now.input - before.input;
  d.output = now.output - before.output;
  d.cached_input = now.cached_input - before.cached_input;
  d.cache_creation = now.cache_creation - before.cache_creation;
  d.requests = now.requests - before.requests;
  d.estimated = now.estimated;
  d.cost_session = now.cost_session - before.cost_session;
  return d;
}

}  // namespace

p9::Status Agent::submit(Submission s) {
  {
    std::lock_guard lock(mu);
    if (killed) return p9::error("agent killed");
    std::size_t bytes = s.text.size();
    for (const auto& q : queue_) bytes += q.text.size();
    if (queue_.size() >= MAX_QUEUE || bytes > MAX_QUEUE_BYTES) return p9::error("prompt queue full");
    queue_.push_back(std::move(s));
    if (running_) return {};
    running_ = true;
  }
  asio::post(ex, [self = shared_from_this()] { self->start_next(); });
  return {};
}

// On ex: the next queued submission becomes the running turn, each with its own cancellation
// signal, so that `stop` interrupts exactly the turn that runs when it arrives.
void Agent::start_next() {
  Submission s;
  UsageRecord before;  // this agent's totals at the turn's start
  bool ended = false;
  {
    std::lock_guard lock(mu);
    if (turn_active_ || held_) return;  // its end (or release) starts the next one
    if (queue_.empty() || killed || hub.stopping) {
      running_ = false;
      cancel_.reset();
      ended = true;
    } else {
      s = std::move(queue_.front());
      queue_.pop_front();
      cancel_ = std::make_shared<asio::cancellation_signal>();
      turn_active_ = true;
      turns_++;
      if (!subagent) tree = std::make_shared<TurnTree>();
      before = stats.totals;
    }
  }
  if (ended) {
    idle_signal->notify();
    return;
  }
  auto end = s.end;
  asio::co_spawn(ex, run(std::move(s)),
                 asio::bind_cancellation_slot(cancel_->slot(), [self = shared_from_this(), before, end](std::exception_ptr e) {
                   std::string thrown;
                   if (e) {
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& x) {
                       spdlog::error("agent {}: turn ended by {}", self->id, x.what());
                       thrown = x.what();
                     }
                   }
                   UsageRecord spent;
                   {
                     std::lock_guard lock(self->mu);
                     self->turn_active_ = false;
                     if (end && !end->ended) {  // the turn threw before its end
                       end->ended = true;
                       end->failure = thrown.empty() ? "turn ended" : thrown;
                     }
                     // Rolled up after the turn's own end took the rest (§8.10.3).
                     self->stats.totals.cost_session += std::exchange(self->rolled_cost_, 0.0);
                     spent = minus(self->stats.totals, before);
                   }
                   // Before the sub-agent counts as idle, so while its issuer's call still runs.
                   if (auto up = self->issuer.lock(); up && self->subagent) up->roll_up(spent);
                   self->idle_signal->notify();  // a sub-agent's request waits for its turn's end
                   // Not from inside the handler: start_next replaces the signal this handler is bound to.
                   asio::post(self->ex, [self] { self->start_next(); });
                 }));
}

void Agent::roll_up(const UsageRecord& u) {
  std::lock_guard lock(mu);
  auto& t = stats.totals;
  t.input += u.input;
  t.output += u.output;
  t.cached_input += u.cached_input;
  t.cache_creation += u.cache_creation;
  t.requests += u.requests;
  t.estimated = t.estimated || u.estimated;
  if (turn_active_) rolled_cost_ += u.cost_session;
  else t.cost_session += u.cost_session;
}

std::optional<Submission> Agent::pop_queued() {
  std::lock_guard lock(mu);
  if (queue_.empty()) return std::nullopt;
  Submission s = std::move(queue_.front());
  queue_.pop_front();
  return s;
}

bool Agent::stop() {
  std::uint64_t turn = 0;  // the turn to interrupt: the one running, or the one about to start
  bool running;
  std::vector<std::shared_ptr<asio::cancellation_signal>> commands;
  {
    std::lock_guard lock(mu);
    inject_.reset();
    running = running_ && !(held_ && !held_stoppable_);
    commands = commands_;
    if (!running && commands.empty()) return false;
    // A hold's work (a manual compaction) sees stopped_; a turn queued behind it is not this stop's.
    if (running && !held_) turn = turn_active_ ? turns_ : turns_ + 1;
  }
  if (running) stopped_->notify();
  asio::post(ex, [self = shared_from_this(), turn, commands = std::move(commands)] {
    std::shared_ptr<asio::cancellation_signal> c;
    {
      std::lock_guard lock(self->mu);
      if (turn && self->turns_ == turn) c = self->cancel_;  // not a later turn that started meanwhile
    }
    if (c) c->emit(asio::cancellation_type::terminal);
    for (const auto& command : commands) command->emit(asio::cancellation_type::terminal);
  });
  return true;
}

std::shared_ptr<asio::cancellation_signal> Agent::begin_command() {
  auto c = std::make_shared<asio::cancellation_signal>();
  std::lock_guard lock(mu);
  commands_.push_back(c);
  return c;
}

void Agent::end_command(const std::shared_ptr<asio::cancellation_signal>& c) {
  std::lock_guard lock(mu);
  std::erase(commands_, c);
}

bool Agent::inject(std::string text) {
  std::lock_guard lock(mu);
  if (!running_ || killed) return false;
  inject_ = std::move(text);
  return true;
}

std::string Agent::take_inject() {
  if (!inject_) return {};
  std::string out = "\n\n<system-user-interruption>\n" + *inject_ + "\n</system-user-interruption>";
  inject_.reset();
  return out;
}

void Agent::requeue_inject() {
  if (!inject_) return;
  queue_.push_front({std::move(*inject_), "inject", true});
  inject_.reset();
}

bool Agent::hold(bool stoppable) {
  std::lock_guard lock(mu);
  if (running_ || killed) return false;
  running_ = held_ = true;
  held_stoppable_ = stoppable;
  held_at_ = stopped_->version();
  return true;
}

void Agent::release() {
  {
    std::lock_guard lock(mu);
    held_ = false;
    requeue_inject();
    if (!queue_.empty()) {
      asio::post(ex, [self = shared_from_this()] { self->start_next(); });
      return;
    }
    running_ = false;
  }
  idle_signal->notify();
}

p9::Result<std::shared_ptr<backend::Backend>> Agent::build_backend(const std::string& b, const std::string& m) const {
  auto settings = backend::resolve_backend(b, hub.conf(), hub.env);
  if (!settings) return p9::error(settings.error().message);
  if (!m.empty()) settings->model = m;
  // The model of backends.conf or OLLIE_MODEL becomes the agent's, an idx field and a cfg value
  // that session.json keeps: held to the rule of one given in a request, or nothing restores.
  if (auto st = check_model(settings->model); !st) return p9::error(b + ": " + st.ename());
  auto made = backend::make_backend(std::move(*settings), hub.http);
  if (!made) return p9::error(made.error().message);
  return std::shared_ptr<backend::Backend>(std::move(*made));
}

void Agent::use_backend(const std::string& b, std::shared_ptr<backend::Backend> be) {
  std::lock_guard lock(mu);
  backend_name = b;
  model = be->model();
  stats.context_length = be->known_context_length().value_or(0);  // 0: asked at the next request
  backend_ = std::move(be);
}

void Agent::clear() {
  std::lock_guard lock(mu);
  history.clear();
}

void Agent::kill() {
  bool turn = false;
  std::shared_ptr<EventFd> resolving;
  {
    std::lock_guard lock(mu);
    killed = true;
    turn = running_;
    queue_.clear();
    resolving = resolving_;
  }
  if (resolving) resolving->raise();
  stop();
  // A turn is interrupted first (§8.9): its readers see the block in flight end, then
  // `interrupted`, as after `ctl stop`, before their EOF.
  transcript.close(turn ? std::optional(make_block("info", "interrupted")) : std::nullopt);
  state_signal_->notify();
  feed_signal_->notify();
}

}  // namespace ollie
