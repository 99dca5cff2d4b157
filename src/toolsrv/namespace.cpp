#include "toolsrv/namespace.hpp"

#include <charconv>
#include <optional>

#include "lib9p/handoff.hpp"
#include "toolsrv/ctl.hpp"
#include "toolsrv/streams.hpp"

namespace toolsrv {
namespace {

using D = virtfs::Dsl<Ctx>;
using Reply = asio::awaitable<p9::Result<std::string>>;
using Text = p9::Result<std::string>;

// Cancels the call when the coroutine ends before its reply (flush, lost connection, shutdown).
struct CancelUnlessAnswered {
  std::shared_ptr<Call> call;
  bool answered = false;
  ~CancelUnlessAnswered() {
    if (!answered) call->cancel();
  }
};

// proc/new: blocks until the process ended and its output is collected (§6.5.1, §6.5.2).
Reply proc_new(Ctx& c, std::string text) {
  auto req = parse_call_request(text);
  if (!req) co_return req.error();
  auto reply = std::make_shared<p9::Handoff<std::string>>();
  auto call = c.session->call(*req, [reply](std::string r) { reply->set(std::move(r)); });
  if (!call) co_return call.error();
  CancelUnlessAnswered guard{*call};
  auto r = co_await reply->get();
  guard.answered = true;
  co_return r;
}

// proc/new.bg: `pid=<n>` once the process started.
Reply proc_new_bg(Ctx& c, std::string text) {
  auto req = parse_call_request(text);
  if (!req) co_return req.error();
  auto started = std::make_shared<p9::Handoff<p9::Result<int>>>();
  auto call = c.session->call_background(*req, [started](p9::Result<int> pid) { started->set(std::move(pid)); });
  if (!call) co_return call.error();
  CancelUnlessAnswered guard{*call};
  auto pid = co_await started->get();
  guard.answered = true;
  if (!pid) co_return pid.error();
  co_return "pid=" + std::to_string(*pid) + "\n";
}

// proc/{pid}: the instance is its Process, so the qids of a pid last as long as the process.
std::optional<virtfs::Instance<Ctx>> lookup_pid(const Ctx& c, const std::string& name) {
  int pid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (ec != std::errc{} || end != name.data() + name.size() || name.front() == '0') return std::nullopt;
  auto p = c.session->processes().find(pid);
  if (!p) return std::nullopt;
  return virtfs::Instance<Ctx>{Ctx{c.session, p}, p};
}

std::vector<std::string> list_pids(Ctx& c) {
  std::vector<std::string> out;
  for (int pid : c.session->processes().pids()) out.push_back(std::to_string(pid));
  return out;
}

}  // namespace

virtfs::Node<Ctx> declare() {
  using namespace virtfs;
  using Open = p9::Result<std::shared_ptr<Cursor>>;
  return D::Dir("/", Mode{0500}, Doc{"the toolsrv namespace of one session"},
      D::Leaf("ctl", Mode{0200}, Doc{"load, unload, forget, env, cwd, agentcwd, sandboxok; one per line"},
              Write([](Ctx& c, std::string text) { return run_ctl(*c.session, text); })),
      D::Leaf("tools", Mode{0600}, Doc{"request <agent>: its loaded tools; *: the whole catalog"},
              Rdwr([](Ctx& c, std::string req) -> Reply { co_return answer_tools(*c.session, req); })),
      D::Leaf("info", Mode{0600}, Doc{"host and cwd; request <agent>, stat <agent> <path>... or resolve <agent> <path>..."}, DefaultRequest{""},
              Rdwr([](Ctx& c, std::string req) -> Reply { co_return answer_info(*c.session, req); })),
      D::Dir("proc", Mode{0500}, Doc{"tool processes"},
          D::Leaf("new", Mode{0600}, Doc{"run a call: headers, blank line, JSON arguments; replies at its end"},
                  Rdwr(proc_new)),
          D::Leaf("new.bg", Mode{0600}, Doc{"start a background call; replies pid=<n>"}, Rdwr(proc_new_bg)),
          D::Template("{pid}", Mode{0500}, Doc{"one process"}, List(list_pids), Lookup(lookup_pid),
              D::Leaf("out", Mode{0400}, Doc{"stdout and stderr interleaved, from the start"},
                      Stream([](Ctx& c) { return Open(out_cursor(c.proc)); })),
              D::Leaf("wait", Mode{0400}, Doc{"the status lines once the process ended"},
                      Stream([](Ctx& c) { return Open(wait_cursor(c.proc)); })),
              D::Leaf("stat", Mode{0400}, Doc{"pid, tool, agent, background, status, ..."},
                      Read([](Ctx& c) {
                        c.proc->touch();
                        return Text(c.proc->stat_text());
                      })),
              D::Leaf("ctl", Mode{0200}, Doc{"term, kill, signal <N>, dismiss"},
                      Write([](Ctx& c, std::string text) {
                        return run_proc_ctl(c.session->processes(), c.proc->pid(), text);
                      })))),
      D::Dir("bypass", Mode{0500}, Doc{"sandbox escapes waiting for the hostowner"},
          D::Leaf("pending", Mode{0400}, Doc{"one JSON line per request and per unresolved end"},
                  Stream([](Ctx& c) { return Open(pending_cursor(c.session->bypass())); })),
          D::Leaf("resolve", Mode{0200}, Doc{"<reqid> allow|deny, one per line"},
                  Write([](Ctx& c, std::string text) { return c.session->bypass().resolve(text); }))));
}

}  // namespace toolsrv
