#include "toolsrv/process.hpp"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

namespace toolsrv {
namespace {

using steady = std::chrono::steady_clock;

enum Kind : std::uint64_t { kind_pidfd = 0, kind_stdout = 1, kind_stderr = 2, kind_stdin = 3, kind_event = 4 };

std::uint64_t tag(int pid, Kind kind) { return (static_cast<std::uint64_t>(pid) << 3) | kind; }

// A write to a pipe whose reader is gone raises SIGPIPE for the writing thread; the table's thread
// blocks it and takes the pending one back.
void swallow_sigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  timespec zero{};
  while (::sigtimedwait(&set, nullptr, &zero) > 0) {}
}

}  // namespace

std::string_view status_name(ProcStatus s) {
  switch (s) {
    case ProcStatus::running: return "running";
    case ProcStatus::exited: return "exited";
    case ProcStatus::signaled: return "signaled";
    case ProcStatus::timeout: return "timeout";
    case ProcStatus::denied: return "denied";
    case ProcStatus::failed: return "failed";
  }
  return "failed";
}

// ---- Process ----

bool Process::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

ProcStatus Process::status() const {
  std::lock_guard lock(mu_);
  return finished_ ? status_ : ProcStatus::running;
}

Process::Chunk Process::read_out(std::uint64_t offset, std::size_t count) const {
  std::lock_guard lock(mu_);
  const std::string& src = finished_ ? final_out_ : combined_.head();
  Chunk c;
  if (offset < src.size()) c.data = src.substr(offset, count);
  c.eof = finished_ && offset + c.data.size() >= src.size();
  return c;
}

std::string Process::header_locked() const {
  std::string h = "pid=" + std::to_string(pid_) + "\nstatus=" + std::string(status_name(status_)) + "\n";
  if (status_ == ProcStatus::exited) h += "exit=" + std::to_string(exit_code_) + "\n";
  if (status_ == ProcStatus::signaled) h += "signal=" + std::to_string(signal_) + "\n";
  h += "stdout=" + std::to_string(stdout_size_locked()) + "\n";
  h += "stderr=" + std::to_string(stderr_size_locked()) + "\n";
  for (const auto& x : extra_headers_) h += x + "\n";
  return h;
}

std::string Process::wait_text() const {
  std::lock_guard lock(mu_);
  return finished_ ? header_locked() : std::string();
}

std::string Process::reply() const {
  std::lock_guard lock(mu_);
  return header_locked() + "\n" + stdout_.render() + stderr_.render();
}

std::string Process::take_reply() {
  std::lock_guard lock(mu_);
  auto r = header_locked() + "\n" + stdout_.render() + stderr_.render();
  if (finished_) trim_locked();
  return r;
}

void Process::trim_locked() {
  if (!trimmed_) {
    stdout_size_ = stdout_.rendered_size();
    stderr_size_ = stderr_.rendered_size();
    trimmed_ = true;
  }
  stdout_.release();
  stderr_.release();
  combined_.release();
}

std::size_t Process::held() const {
  std::lock_guard lock(mu_);
  return stdout_.held() + stderr_.held() + combined_.held() + final_out_.capacity();
}

std::string Process::stat_text() const {
  std::lock_guard lock(mu_);
  const auto status = finished_ ? status_ : ProcStatus::running;
  std::string s = "pid=" + std::to_string(pid_) + "\ntool=" + tool_ + "\nagent=" + agent_ +
                  "\nbackground=" + (background_ ? "true" : "false") + "\nstatus=" + std::string(status_name(status)) + "\n";
  if (finished_ && status == ProcStatus::exited) s += "exit=" + std::to_string(exit_code_) + "\n";
  if (finished_ && status == ProcStatus::signaled) s += "signal=" + std::to_string(signal_) + "\n";
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(started_wall_.time_since_epoch()).count();
  const auto end = finished_ ? ended_ : steady::now();
  const double runtime = std::chrono::duration<double>(end - started_).count();
  char rt[32];
  std::snprintf(rt, sizeof rt, "%.1f", runtime);
  s += "started=" + std::to_string(secs) + "\nruntime=" + rt + "\n";
  s += "output=" + std::to_string(stdout_size_locked() + stderr_size_locked()) + "\n";
  return s;
}

void Process::touch() {
  std::lock_guard lock(mu_);
  last_read_ = steady::now();
}

// ---- ProcessTable ----

struct ProcessTable::Slot {
  std::shared_ptr<Process> proc;
  Spawned child;
  std::string stdin_data;
  std::size_t stdin_off = 0;
  std::optional<steady::time_point> deadline;
  std::optional<steady::time_point> drain_until;
  bool exited = false;
  ProcStatus end_status = ProcStatus::exited;
  std::function<void(const std::shared_ptr<Process>&)> on_finish;
};

struct ProcessTable::Command {
  Launch launch;
  std::function<void(std::shared_ptr<Process>)> started;
};

ProcessTable::ProcessTable(std::chrono::seconds keep) : keep_(keep) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag(0, kind_event);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, event_.get(), &ev);
  thread_ = std::thread([this] { loop(); });
}

ProcessTable::~ProcessTable() { stop(); }

void ProcessTable::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  kill_all();
  wake();
  if (thread_.joinable()) thread_.join();
}

void ProcessTable::wake() {
  const std::uint64_t one = 1;
  (void)!::write(event_.get(), &one, sizeof one);
}

std::shared_ptr<Process> ProcessTable::make_process(const std::string& tool, const std::string& agent, bool background) {
  auto p = std::make_shared<Process>();
  p->tool_ = tool;
  p->agent_ = agent;
  p->background_ = background;
  p->started_wall_ = std::chrono::system_clock::now();
  p->started_ = p->ended_ = p->last_read_ = steady::now();
  std::lock_guard lock(mu_);
  p->pid_ = next_pid_++;
  procs_.emplace(p->pid_, p);
  return p;
}

void ProcessTable::start(Launch launch, std::function<void(std::shared_ptr<Process>)> started) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      commands_.push_back(std::make_unique<Command>(Command{std::move(launch), std::move(started)}));
      wake();
      return;
    }
  }
  started(add_finished(launch.tool, launch.agent, launch.background, ProcStatus::failed, "toolsrv is stopping"));
}

std::shared_ptr<Process> ProcessTable::add_finished(const std::string& tool, const std::string& agent, bool background,
                                                    ProcStatus status, const std::string& reason,
                                                    std::vector<std::string> headers) {
  auto p = make_process(tool, agent, background);
  {
    std::lock_guard lock(p->mu_);
    p->extra_headers_ = std::move(headers);
    p->stderr_.append(reason + "\n");
    p->combined_.append(reason + "\n");
    p->final_out_ = p->combined_.render();
    p->status_ = status;
    p->finished_ = true;
    p->reaped_ = true;
  }
  p->notifier_.notify();
  cap_finished();
  return p;
}

std::shared_ptr<Process> ProcessTable::find(int pid) const {
  std::lock_guard lock(mu_);
  const auto it = procs_.find(pid);
  return it == procs_.end() ? nullptr : it->second;
}

std::vector<int> ProcessTable::pids() const {
  std::lock_guard lock(mu_);
  std::vector<int> out;
  for (const auto& [pid, p] : procs_) out.push_back(pid);
  return out;
}

p9::Result<void> ProcessTable::signal(int pid, int sig) {
  auto p = find(pid);
  if (!p) return p9::error("no such process");
  std::lock_guard lock(p->mu_);
  // While the leader is not reaped its zombie keeps the group id from being reused.
  if (p->reaped_ || p->os_pid_ < 0) return p9::error("process has exited");
  ::kill(-p->os_pid_, sig);
  return {};
}

p9::Result<void> ProcessTable::control(int pid, std::string_view command) {
  while (!command.empty() && (command.back() == '\n' || command.back() == ' ')) command.remove_suffix(1);
  if (command == "term") return signal(pid, SIGTERM);
  if (command == "kill") return signal(pid, SIGKILL);
  if (command == "dismiss") {
    if (!find(pid)) return p9::error("no such process");
    dismiss(pid);
    return {};
  }
  if (command.substr(0, 7) == "signal ") {
    auto arg = command.substr(7);
    while (!arg.empty() && arg.front() == ' ') arg.remove_prefix(1);
    int sig = 0;
    const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), sig);
    if (ec != std::errc{} || end != arg.data() + arg.size() || sig < 1 || sig > 64) {
      return p9::error("invalid signal: " + std::string(arg));
    }
    return signal(pid, sig);
  }
  return p9::error("unknown control message");
}

void ProcessTable::cancel(int pid) { (void)signal(pid, SIGKILL); }

void ProcessTable::dismiss(int pid) {
  cancel(pid);
  std::lock_guard lock(mu_);
  procs_.erase(pid);
}

void ProcessTable::forget_agent(const std::string& agent) {
  std::vector<int> mine;
  {
    std::lock_guard lock(mu_);
    for (const auto& [pid, p] : procs_) {
      if (p->agent_ == agent) mine.push_back(pid);
    }
  }
  for (int pid : mine) dismiss(pid);
}

void ProcessTable::kill_all() {
  for (int pid : pids()) cancel(pid);
}

std::size_t ProcessTable::collect() {
  const auto now = steady::now();
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (auto it = procs_.begin(); it != procs_.end();) {
    auto& p = *it->second;
    std::lock_guard plock(p.mu_);
    if (p.finished_ && now - std::max(p.ended_, p.last_read_) >= keep_) {
      it = procs_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

std::size_t ProcessTable::finished_count() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [pid, p] : procs_) n += p->finished() ? 1 : 0;
  return n;
}

void ProcessTable::cap_finished() {
  std::lock_guard lock(mu_);
  // Each kind on its own: the calls of a busy agent (their output went out in their replies)
  // never push out a background process whose output its interrupt points to (§6.10).
  std::vector<std::pair<steady::time_point, int>> finished[2];  // [background]: last use, pid
  for (const auto& [pid, p] : procs_) {
    std::lock_guard plock(p->mu_);
    if (p->finished_) finished[p->background_ ? 1 : 0].emplace_back(std::max(p->ended_, p->last_read_), pid);
  }
  for (auto& kind : finished) {
    if (kind.size() <= proc_finished_max) continue;
    std::sort(kind.begin(), kind.end());
    for (std::size_t i = 0; i + proc_finished_max < kind.size(); ++i) procs_.erase(kind[i].second);
  }
}

// ---- the table's thread ----

void ProcessTable::do_start(Command& cmd) {
  auto& l = cmd.launch;
  auto proc = make_process(l.tool, l.agent, l.background);
  l.spec.ruleset_fd = l.ruleset ? l.ruleset->get() : -1;
  // Read at the table's first spawn, not per spawn (a fifth of its time in toolsrv): toolsrv's
  // dispositions are settled before it serves (run(): SIGPIPE, then StopSignals).
  if (!resets_) resets_ = non_default_signals();
  auto child = spawn(l.spec, *resets_);
  l.ruleset.reset();
  if (!child) {
    {
      std::lock_guard lock(proc->mu_);
      proc->extra_headers_ = std::move(l.headers);
      proc->stderr_.append(child.ename() + "\n");
      proc->combined_.append(child.ename() + "\n");
      proc->final_out_ = proc->combined_.render();
      proc->status_ = ProcStatus::failed;
      proc->finished_ = true;
      proc->reaped_ = true;
    }
    proc->notifier_.notify();
    cap_finished();
    cmd.started(proc);
    return;
  }
  if (child->unix_listener && l.on_unix_listener) l.on_unix_listener(std::move(child->unix_listener));
  auto slot = std::make_unique<Slot>();
  slot->proc = proc;
  slot->child = std::move(*child);
  slot->stdin_data = std::move(l.stdin_data);
  slot->on_finish = std::move(l.on_finish);
  if (l.timeout.count() > 0 && !l.background) slot->deadline = steady::now() + l.timeout;
  {
    std::lock_guard lock(proc->mu_);
    proc->os_pid_ = slot->child.pid;
    proc->extra_headers_ = std::move(l.headers);
  }
  const int pid = proc->pid();
  auto add = [&](int fd, Kind kind, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag(pid, kind);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  };
  add(slot->child.pidfd.get(), kind_pidfd, EPOLLIN);
  add(slot->child.stdout_r.get(), kind_stdout, EPOLLIN);
  add(slot->child.stderr_r.get(), kind_stderr, EPOLLIN);
  // The arguments mostly fit the pipe: written now, the descriptor waited on only for the rest.
  if (slot->stdin_data.empty() || write_stdin(*slot)) {
    slot->child.stdin_w.reset();
    slot->stdin_data.clear();
  } else {
    add(slot->child.stdin_w.get(), kind_stdin, EPOLLOUT);
  }
  slots_.emplace(pid, std::move(slot));
  cmd.started(proc);
}

bool ProcessTable::write_stdin(Slot& slot) {
  const auto w = ::write(slot.child.stdin_w.get(), slot.stdin_data.data() + slot.stdin_off,
                         slot.stdin_data.size() - slot.stdin_off);
  const int err = w < 0 ? errno : 0;
  if (w > 0) slot.stdin_off += static_cast<std::size_t>(w);
  if (err == EPIPE) swallow_sigpipe();
  return (err != 0 && err != EAGAIN && err != EINTR) || slot.stdin_off == slot.stdin_data.size();
}

void ProcessTable::close_fd(Slot&, UniqueFd& fd) {
  if (!fd) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd.get(), nullptr);
  fd.reset();
}

void ProcessTable::on_readable(Slot& slot, int which) {
  auto& fd = which == kind_stdout ? slot.child.stdout_r : slot.child.stderr_r;
  if (!fd) return;
  char buf[65536];
  bool got = false;
  bool closed = false;
  for (int round = 0; round < 16; ++round) {  // bounded: other processes get their turn
    const auto n = ::read(fd.get(), buf, sizeof buf);
    if (n > 0) {
      std::lock_guard lock(slot.proc->mu_);
      const std::string_view data(buf, static_cast<std::size_t>(n));
      (which == kind_stdout ? slot.proc->stdout_ : slot.proc->stderr_).append(data);
      slot.proc->combined_.append(data);
      got = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    closed = true;  // EOF or error
    break;
  }
  if (closed) close_fd(slot, fd);
  if (got) slot.proc->notifier_.notify();
}

void ProcessTable::on_exit(Slot& slot) {
  auto& p = *slot.proc;
  {
    std::lock_guard lock(p.mu_);
    siginfo_t info{};
    if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(slot.child.pidfd.get()), &info, WEXITED | WNOWAIT) != 0) return;
    // Whatever the tool left in its group dies now, while the zombie leader still pins the group id.
    ::kill(-p.os_pid_, SIGKILL);
    info = {};
    ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(slot.child.pidfd.get()), &info, WEXITED);
    p.reaped_ = true;
    if (p.timed_out_) {
      slot.end_status = ProcStatus::timeout;
    } else if (info.si_code == CLD_EXITED) {
      slot.end_status = ProcStatus::exited;
      p.exit_code_ = info.si_status;
    } else {
      slot.end_status = ProcStatus::signaled;
      p.signal_ = info.si_status;
    }
  }
  slot.exited = true;
  close_fd(slot, slot.child.pidfd);
  close_fd(slot, slot.child.stdin_w);
  slot.drain_until = steady::now() + drain_limit;
}

void ProcessTable::finish(Slot& slot) {
  close_fd(slot, slot.child.stdout_r);
  close_fd(slot, slot.child.stderr_r);
  auto proc = slot.proc;
  {
    std::lock_guard lock(proc->mu_);
    proc->status_ = slot.end_status;
    proc->final_out_ = proc->combined_.render();
    proc->combined_.release();
    if (proc->background_) proc->trim_locked();  // nobody takes its reply: out and wait serve it
    proc->ended_ = proc->last_read_ = steady::now();
    proc->finished_ = true;
  }
  auto on_finish = std::move(slot.on_finish);
  slots_.erase(proc->pid());
  proc->notifier_.notify();
  cap_finished();
  if (on_finish) on_finish(proc);
}

void ProcessTable::loop() {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
  const auto collect_every = std::min<steady::duration>(std::chrono::seconds(30), keep_);
  auto next_collect = steady::now() + collect_every;
  bool stopping = false;
  while (true) {
    auto now = steady::now();
    auto next = next_collect;
    for (const auto& [pid, s] : slots_) {
      if (s->deadline && !s->exited) next = std::min(next, *s->deadline);
      if (s->drain_until) next = std::min(next, *s->drain_until);
    }
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    epoll_event events[64];
    const int n = ::epoll_wait(epoll_.get(), events, 64, stopping ? 50 : static_cast<int>(std::clamp<long long>(wait_ms + 1, 0, 60000)));
    bool commands = false;
    for (int i = 0; i < n; ++i) {
      const auto kind = static_cast<Kind>(events[i].data.u64 & 7);
      const int pid = static_cast<int>(events[i].data.u64 >> 3);
      if (kind == kind_event) {
        std::uint64_t v;
        (void)!::read(event_.get(), &v, sizeof v);
        commands = true;
        continue;
      }
      const auto it = slots_.find(pid);
      if (it == slots_.end()) continue;
      auto& slot = *it->second;
      if (kind == kind_pidfd) {
        on_exit(slot);
      } else if (kind == kind_stdout || kind == kind_stderr) {
        on_readable(slot, kind);
      } else if (kind == kind_stdin && slot.child.stdin_w && write_stdin(slot)) {
        close_fd(slot, slot.child.stdin_w);
        slot.stdin_data.clear();
      }
    }
    now = steady::now();
    std::vector<int> done;
    for (auto& [pid, s] : slots_) {
      if (s->deadline && !s->exited && now >= *s->deadline) {
        std::lock_guard lock(s->proc->mu_);
        s->proc->timed_out_ = true;
        ::kill(-s->proc->os_pid_, SIGKILL);
        s->deadline.reset();
      }
      if (s->exited && ((!s->child.stdout_r && !s->child.stderr_r) || now >= *s->drain_until)) done.push_back(pid);
    }
    for (int pid : done) finish(*slots_.at(pid));
    if (now >= next_collect) {
      collect();
      next_collect = now + collect_every;
    }
    if (commands) {
      std::vector<std::unique_ptr<Command>> todo;
      {
        std::lock_guard lock(mu_);
        todo.swap(commands_);
        stopping = stopping_;
      }
      for (auto& c : todo) {
        if (stopping) {
          c->started(add_finished(c->launch.tool, c->launch.agent, c->launch.background, ProcStatus::failed, "toolsrv is stopping"));
        } else {
          do_start(*c);
        }
      }
    }
    if (stopping) {
      for (auto& [pid, s] : slots_) {
        if (!s->exited) ::kill(-s->proc->os_pid_, SIGKILL);
      }
      if (slots_.empty()) return;
    }
  }
}

}  // namespace toolsrv
