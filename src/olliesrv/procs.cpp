// Background processes (spec §6.10): the start through proc/new.bg, the watcher that delivers
// `<system-proc-interrupt>` at the end, and the entry's life in the agent's `procs` (as long as
// toolsrv keeps the pid's directory, §6.5.3).
//
// The watcher runs on the agent's executor and holds the agent weakly: a killed agent is not
// kept alive by its processes (toolsrv's `forget` kills them; their streams then end).
#include "procs.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <utility>

#include "agent.hpp"
#include "backend/json.hpp"
#include "lib9p/utf8.hpp"
#include "result.hpp"
#include "session.hpp"
#include "toolsrv/capture.hpp"

namespace ollie {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// Bytes of output the interrupt carries (§6.10).
constexpr std::size_t interrupt_bytes = 4096;
/// Characters of the `cmd` attribute (§6.10).
constexpr std::size_t cmd_chars = 200;
/// toolsrv keeps an exited process this long past its exit and its last read (§6.5.3).
constexpr auto toolsrv_keeps = 10min;
/// How often an exited entry that toolsrv still has is looked at again.
constexpr auto recheck = 1min;

std::string xml_attr(std::string_view s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += ch;
    }
  }
  return out;
}

bool continuation(char ch) { return (static_cast<unsigned char>(ch) & 0xC0) == 0x80; }

/// key=value lines (wait's status header, §6.5.2).
std::map<std::string, std::string> header_of(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::size_t at = 0;
  while (at < text.size()) {
    auto nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(at, nl - at);
    at = nl + 1;
    if (const auto eq = line.find('='); eq != std::string::npos && eq > 0) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

/// toolsrv keeps a stream's first 10 MiB, then writes `\n[… <n> bytes omitted …]\n` and the last
/// 64 KiB (§6.5.2): what `out` gives of a longer one.
constexpr std::uint64_t capture_head = toolsrv::output_head_cap;
constexpr std::size_t omission_line_max = 64;

/// The bytes toolsrv left out of a stream beyond those of its omission line, from the bytes read
/// at capture_head; 0 when there is no such line (the stream was not cut).
std::uint64_t cut_by_toolsrv(std::string_view at_head) {
  constexpr std::string_view open = "\n[\u2026 ", close = " bytes omitted \u2026]\n";
  if (!at_head.starts_with(open)) return 0;
  std::uint64_t n = 0;
  std::size_t k = open.size();
  for (; k < at_head.size() && k < open.size() + 20 && at_head[k] >= '0' && at_head[k] <= '9'; k++) n = n * 10 + (at_head[k] - '0');
  if (k == open.size() || at_head.substr(k, close.size()) != close) return 0;
  const std::uint64_t line = k + close.size();
  return n > line ? n - line : 0;
}

/// The end of a process as its `wait` file tells it; "lost" when toolsrv went away first.
struct Ending {
  std::string status = "lost", code;
  std::string output;  ///< the last bytes of the combined output
  std::uint64_t total = 0;  ///< what the process wrote (what toolsrv left out included)
};

asio::awaitable<Ending> follow(std::shared_ptr<ToolHost> host, std::shared_ptr<BgProc> p) {
  Ending e;
  const std::string dir = "proc/" + std::to_string(p->pid) + "/";
  // Both opened first: once the process ends its directory may be dismissed, while open fids
  // keep reading it.
  auto out = co_await host->open(p->instance, dir + "out", p9::OREAD);
  if (!out) co_return e;
  auto wait = co_await host->open(p->instance, dir + "wait", p9::OREAD);
  if (!wait) co_return e;
  std::string at_head;  // the bytes from capture_head on, where toolsrv's omission line would be
  for (;;) {
    auto r = co_await out->read();
    if (!r) co_return e;
    if (r->empty()) {
      e.total += cut_by_toolsrv(at_head);
      break;
    }
    if (const auto end = e.total + r->size(); end > capture_head && e.total < capture_head + omission_line_max) {
      const auto from = e.total < capture_head ? capture_head - e.total : 0;
      at_head.append(std::string_view(*r).substr(from, std::min<std::uint64_t>(end, capture_head + omission_line_max) - e.total - from));
    }
    e.total += r->size();
    e.output += *r;
    if (e.output.size() > 2 * interrupt_bytes) e.output.erase(0, e.output.size() - interrupt_bytes);
  }
  auto w = co_await wait->read_all(max_proc_status);
  if (!w) co_return e;
  auto kv = header_of(*w);
  if (!kv.count("status")) co_return e;
  e.status = kv["status"];
  e.code = e.status == "exited" ? kv["exit"] : e.status == "signaled" ? kv["signal"] : "";
  co_return e;
}

/// Removes the entry (if it is still this one).
void forget(const std::shared_ptr<Agent>& a, const std::shared_ptr<BgProc>& p) {
  std::lock_guard lock(a->mu);
  if (auto it = a->procs.find(p->pid); it != a->procs.end() && it->second == p) a->procs.erase(it);
}

asio::awaitable<void> watch(std::weak_ptr<Agent> wa, std::weak_ptr<Session> ws, std::shared_ptr<ToolHost> host,
                            std::shared_ptr<BgProc> p) {
  Ending e = co_await follow(host, p);
  const auto ended = Clock::now();
  if (auto s = ws.lock()) {  // what it wrote is seen from now on (§8.3.3)
    s->background_running--;
    s->drop_results();
  }
  if (!p->claim_interrupt()) co_return;  // olliesrv's shutdown told of it
  {
    auto a = wa.lock();
    if (!a) co_return;
    // Delivered like any prompt: a turn at once when idle, else queued (§6.10).
    Submission interrupt;
    interrupt.text = proc_interrupt(p->pid, p->cmd, e.status, e.code, redacted(e.output, a->secret), e.total);
    interrupt.origin = "proc";
    if (auto st = a->submit(std::move(interrupt)); !st)
      spdlog::warn("agent {}: interrupt of process {} not delivered: {}", a->id, p->pid, st.ename());
    if (e.status == "lost") {
      forget(a, p);
      co_return;
    }
  }
  // The entry lasts as long as toolsrv's directory: 10 minutes past the exit and the last read.
  const auto ex = co_await asio::this_coro::executor;
  auto t = std::make_shared<asio::steady_timer>(ex);
  if (!p->on_end_watch([ex, weak = std::weak_ptr<asio::steady_timer>(t)] {
        asio::post(ex, [weak] {  // a timer is touched on its executor
          if (auto t = weak.lock()) t->cancel();
        });
      }))
    co_return;
  for (auto due = std::max(ended, p->last_read()) + toolsrv_keeps;;) {
    if (p->watch_ended()) co_return;
    t->expires_at(due + 1s);
    auto [ec] = co_await t->async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) co_return;  // end_watch
    auto a = wa.lock();
    if (!a) co_return;
    {
      std::lock_guard lock(a->mu);
      if (a->killed || !a->procs.count(p->pid)) co_return;
    }
    const auto read_by_then = std::max(ended, p->last_read()) + toolsrv_keeps;
    if (read_by_then > due) {
      due = read_by_then;
      continue;
    }
    auto there = co_await host->open(p->instance, "proc/" + std::to_string(p->pid), -1);  // a walk: no read, no touch
    if (!there) {
      forget(a, p);
      co_return;
    }
    due = Clock::now() + recheck;
  }
}

}  // namespace

void BgProc::touch() {
  std::lock_guard lock(mu_);
  last_read_ = Clock::now();
}

Clock::time_point BgProc::last_read() const {
  std::lock_guard lock(mu_);
  return last_read_;
}

void BgProc::end_watch() {
  std::function<void()> end;
  {
    std::lock_guard lock(mu_);
    watch_ended_ = true;
    end = std::move(end_watch_);
  }
  if (end) end();
}

bool BgProc::on_end_watch(std::function<void()> end) {
  std::lock_guard lock(mu_);
  if (watch_ended_) return false;
  end_watch_ = std::move(end);
  return true;
}

bool BgProc::watch_ended() const {
  std::lock_guard lock(mu_);
  return watch_ended_;
}

bool BgProc::claim_interrupt() {
  std::lock_guard lock(mu_);
  return !std::exchange(interrupt_claimed_, true);
}

void end_watches(Agent& a) {
  std::vector<std::shared_ptr<BgProc>> procs;
  {
    std::lock_guard lock(a.mu);
    for (const auto& [pid, p] : a.procs) procs.push_back(p);
  }
  for (const auto& p : procs) p->end_watch();
}

void report_lost_at_stop(Agent& a) {
  std::vector<std::shared_ptr<BgProc>> procs;
  {
    std::lock_guard lock(a.mu);
    for (const auto& [pid, p] : a.procs) procs.push_back(p);
  }
  for (const auto& p : procs) {
    if (!p->claim_interrupt()) continue;  // it ended: its watcher delivered it
    const std::string text = proc_interrupt(p->pid, p->cmd, "lost", "", "", 0);
    {
      std::lock_guard lock(a.mu);
      HistoryMessage m;
      m.msg.role = backend::Role::user;
      m.msg.content = text;
      a.history.push_back(std::move(m));
    }
    a.transcript.append(make_block("user", text, "proc"));
  }
}

std::string proc_cmd(const std::string& tool, const std::string& args) {
  auto j = backend::parse_json(args.empty() ? std::string_view("{}") : std::string_view(args));  // bounded: dumped below
  std::string cmd;
  if (j.is_object() && j.contains("cmd") && j["cmd"].is_string()) cmd = j["cmd"].get<std::string>();
  else cmd = tool + " " + (j.is_discarded() ? args : j.dump());  // nlohmann's objects keep their keys sorted
  cmd = p9::valid_utf8(cmd);
  std::size_t chars = 0, at = 0;
  for (; at < cmd.size(); at++) {
    if (continuation(cmd[at])) continue;
    if (chars++ == cmd_chars) break;
  }
  cmd.resize(at);
  return cmd;
}

std::string proc_interrupt(int pid, const std::string& cmd, const std::string& status, const std::string& code,
                           const std::string& output, std::uint64_t total) {
  std::string head = "<system-proc-interrupt id=\"" + std::to_string(pid) + "\" cmd=\"" + xml_attr(cmd) +
                     "\" status=\"" + xml_attr(status) + "\"";
  if (status == "exited") head += " exit=\"" + xml_attr(code) + "\"";
  if (status == "signaled") head += " signal=\"" + xml_attr(code) + "\"";
  head += ">\n";
  std::string tail = output.size() > interrupt_bytes ? output.substr(output.size() - interrupt_bytes) : output;
  std::size_t lead = 0;
  while (lead < tail.size() && continuation(tail[lead])) lead++;  // the cut moves forward to a character
  tail.erase(0, lead);
  std::string body;
  if (tail.size() < total)
    body = "[… " + std::to_string(total - tail.size()) + " bytes omitted; full output in proc/" + std::to_string(pid) + "/out]\n";
  body += p9::valid_utf8(tail);
  if (!body.empty() && body.back() != '\n') body += '\n';
  return head + body + "</system-proc-interrupt>";
}

asio::awaitable<ToolOutcome> start_background(std::shared_ptr<Agent> a, ToolCallRequest req) {
  auto s = a->session.lock();
  if (!s) co_return ToolOutcome{"error: session killed", true};
  auto host = s->host;
  auto cmd = proc_cmd(req.tool, req.args);
  auto started = co_await host->start_background(req);
  if (!started) {
    // toolsrv's `start failed: <reason>` (§6.5.1) is the result `error: <reason>` (§8.3.4), as
    // for a call in the foreground.
    constexpr std::string_view start_failed = "start failed: ";
    std::string_view why = started.ename();
    if (why.starts_with(start_failed)) why.remove_prefix(start_failed.size());
    co_return ToolOutcome{"error: " + std::string(why), true};
  }
  auto p = std::make_shared<BgProc>();
  p->pid = started->pid;
  p->instance = started->instance;
  p->tool = req.tool;
  p->cmd = std::move(cmd);
  {
    std::lock_guard lock(a->mu);
    a->procs[p->pid] = p;
  }
  s->background_running++;
  asio::co_spawn(a->ex, watch(a, s, host, p), asio::detached);
  co_return ToolOutcome{"background process " + std::to_string(p->pid) + " started (" + req.tool + ")", false};
}

}  // namespace ollie
