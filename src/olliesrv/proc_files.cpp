// An agent's `proc/` (spec §2.7, §6.5.3, §6.5.4): one directory per background process it
// started that toolsrv still tracks, whose files are toolsrv's own, reached through the
// session's ToolHost. Every blocked read is a read of toolsrv's file, so a Tflush of it reaches
// toolsrv.
#include <charconv>

#include "agent.hpp"
#include "agent_files.hpp"
#include "session.hpp"

namespace ollie {

namespace {

using D = virtfs::Dsl<Ctx>;
using Text = p9::Result<std::string>;

std::string path_of(const BgProc& p, const char* file) { return "proc/" + std::to_string(p.pid) + "/" + file; }

/// The entry goes when toolsrv no longer has the pid (dismissed, expired, past toolsrv's count of
/// finished processes, or toolsrv is gone).
p9::Error no_such_process(Agent& a, const std::shared_ptr<BgProc>& p) {
  {
    std::lock_guard lock(a.mu);
    if (auto it = a.procs.find(p->pid); it != a.procs.end() && it->second == p) a.procs.erase(it);
  }
  return p9::Error{"no such process: " + std::to_string(p->pid)};
}

p9::Error no_such_process(const Ctx& c) { return no_such_process(*c.agent, c.proc); }

std::shared_ptr<ToolHost> host_of(const Ctx& c) { return c.session->host; }

// ---- out and wait: toolsrv's streams, one toolsrv fid per fid ---------------------------------

class RemoteStream : public virtfs::Cursor {
 public:
  RemoteStream(std::weak_ptr<Agent> a, std::shared_ptr<ToolHost> host, std::shared_ptr<BgProc> p, std::string path,
               bool hostowner)
      : agent_(std::move(a)),
        host_(std::move(host)),
        proc_(std::move(p)),
        path_(std::move(path)),
        places_(hostowner ? host_->owner_streams : host_->agent_streams) {}

  // Bytes come only through wait: nothing is buffered here.
  virtfs::Chunk read(std::size_t) override { return {{}, eof_, gone_}; }
  std::shared_ptr<virtfs::Signal> signal() override { return ended_; }

  asio::awaitable<virtfs::Chunk> wait(std::size_t max) override {
    auto turn = co_await turn_->enter(1);  // reads of one fid in flight together take turns on its toolsrv fid
    if (eof_ || killed()) co_return end();
    proc_->touch();
    // A flushed read may have taken bytes that never reached us: read again from the start.
    if (in_flight_) remote_.reset();
    if (!remote_) {
      if (!place_) {
        auto place = co_await places_->enter(ToolHost::max_streams);
        place_.emplace(std::move(place));
      }
      auto f = co_await host_->open(proc_->instance, path_, p9::OREAD);
      if (!f) co_return gone();
      remote_.emplace(std::move(*f));
      for (std::uint64_t skipped = 0; skipped < pos_;) {
        auto r = co_await read_remote(static_cast<std::uint32_t>(std::min<std::uint64_t>(pos_ - skipped, 65536)));
        if (!r) co_return gone();
        if (r->empty()) co_return end();
        skipped += r->size();
      }
    }
    auto r = co_await read_remote(static_cast<std::uint32_t>(std::min<std::size_t>(max, 65536)));
    if (!r) co_return gone();
    if (r->empty()) co_return end();
    // Flushed after toolsrv's reply came (its value is handed even to a cancelled read): this
    // read gets no reply (§1.5), so its bytes are not delivered, and the next read takes them
    // again from toolsrv.
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) {
      in_flight_ = true;
      throw std::system_error(asio::error::operation_aborted);
    }
    pos_ += r->size();
    co_return virtfs::Chunk{std::move(*r), false};
  }

 private:
  asio::awaitable<p9::Result<std::string>> read_remote(std::uint32_t count) {
    in_flight_ = true;  // stays set when the read is cancelled
    auto r = co_await remote_->read(count);
    in_flight_ = false;
    co_return r;
  }
  // toolsrv has no such process any more (dismissed, expired, or toolsrv lost): before a byte
  // reached this fid it is no process, as stat says, not an empty stream; after, what was read
  // stands and the stream ends.
  virtfs::Chunk gone() {
    if (pos_ == 0)
      if (auto a = agent_.lock()) gone_ = no_such_process(*a, proc_).ename;
    return end();
  }
  virtfs::Chunk end() {
    eof_ = true;
    remote_.reset();
    place_.reset();
    ended_->notify();
    return {{}, true, gone_};
  }
  bool killed() const {
    auto a = agent_.lock();
    if (!a) return true;
    std::lock_guard lock(a->mu);
    return a->killed;
  }

  std::weak_ptr<Agent> agent_;
  std::shared_ptr<ToolHost> host_;
  std::shared_ptr<BgProc> proc_;
  std::string path_;
  std::shared_ptr<virtfs::Gate> places_;     ///< the session's streams of the reader's kind (hostowner, agents)
  std::optional<virtfs::Gate::Pass> place_;  ///< one of them, while remote_ may be open
  std::optional<p9::AsyncFid> remote_;
  std::uint64_t pos_ = 0;  ///< bytes delivered
  bool eof_ = false, in_flight_ = false;
  std::string gone_;  ///< the process was gone before a byte came: every read's error
  std::shared_ptr<virtfs::Gate> turn_ = std::make_shared<virtfs::Gate>();
  std::shared_ptr<virtfs::Signal> ended_ = std::make_shared<virtfs::Signal>();
};

template <const char* File>
p9::Result<std::shared_ptr<virtfs::Cursor>> open_stream(Ctx& c) {
  c.proc->touch();
  return std::shared_ptr<virtfs::Cursor>(
      std::make_shared<RemoteStream>(c.agent, host_of(c), c.proc, path_of(*c.proc, File), c.who.hostowner));
}

constexpr char out_name[] = "out";
constexpr char wait_name[] = "wait";

// ---- stat and ctl ------------------------------------------------------------------------------

asio::awaitable<Text> read_stat(Ctx& c) {
  c.proc->touch();
  auto f = co_await host_of(c)->open(c.proc->instance, path_of(*c.proc, "stat"), p9::OREAD);
  if (!f) co_return no_such_process(c);
  co_return co_await f->read_all(max_proc_status);
}

asio::awaitable<p9::Status> write_ctl(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) co_return st;
  c.proc->touch();
  auto host = host_of(c);
  auto f = co_await host->open(c.proc->instance, path_of(*c.proc, "ctl"), p9::OWRITE);
  if (!f) co_return no_such_process(c);
  if (auto w = co_await f->write(text); !w) co_return w.error();
  auto st = co_await f->clunk();  // toolsrv's answer: `process has exited`, `invalid signal: x`, …
  if (text.find("dismiss") != std::string::npos) {
    // After a dismiss the directory is gone (looked at with a walk, which is not a read).
    auto there = co_await host->open(c.proc->instance, "proc/" + std::to_string(c.proc->pid), -1);
    if (!there) (void)no_such_process(c);
  }
  co_return st;
}

// ---- proc/ -------------------------------------------------------------------------------------

/// Under the agent's mu: toolsrv tracks only its own pids; those of an instance gone since (lost,
/// or stopped idle) are no one's, and go.
void drop_gone(Agent& a, std::uint64_t live) {
  std::erase_if(a.procs, [live](const auto& e) { return e.second->instance != live; });
}

std::vector<std::string> pids(Ctx& c) {
  const auto live = host_of(c)->live_instance();
  std::vector<std::string> out;
  std::lock_guard lock(c.agent->mu);
  drop_gone(*c.agent, live);
  for (const auto& [pid, p] : c.agent->procs) out.push_back(std::to_string(pid));  // numerically: a map by pid
  return out;
}

std::optional<virtfs::Instance<Ctx>> pid_lookup(const Ctx& c, const std::string& name) {
  int pid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (ec != std::errc{} || end != name.data() + name.size() || name.front() == '0') return std::nullopt;
  std::shared_ptr<BgProc> p;
  const auto live = host_of(c)->live_instance();
  {
    std::lock_guard lock(c.agent->mu);
    drop_gone(*c.agent, live);
    auto it = c.agent->procs.find(pid);
    if (it == c.agent->procs.end()) return std::nullopt;
    p = it->second;
  }
  Ctx child = c;
  child.proc = p;
  return virtfs::Instance<Ctx>{std::move(child), p};
}

}  // namespace

virtfs::Node<Ctx> proc_dir() {
  using namespace virtfs;
  return D::Dir(
      "proc", Mode{0500}, Owner(agent_owner), Doc{"the agent's background processes, by pid"},
      D::Template("{pid}", Mode{0500}, Owner(agent_owner), Doc{"one background process (toolsrv's proc/{pid})"}, List(pids),
                  Lookup(pid_lookup),
                  D::Leaf("out", Mode{0400}, Owner(agent_owner), Doc{"its stdout and stderr interleaved, from the start; EOF after its exit"},
                          Stream(open_stream<out_name>)),
                  D::Leaf("wait", Mode{0400}, Owner(agent_owner), Doc{"nothing until it ends, then its status lines"},
                          Stream(open_stream<wait_name>)),
                  D::Leaf("stat", Mode{0400}, Owner(agent_owner), Doc{"pid tool agent background status exit signal started runtime output, key=value"},
                          Read(read_stat)),
                  D::Leaf("ctl", Mode{0200}, Owner(agent_owner), Doc{"term, kill, signal <N>, dismiss"}, Write(write_ctl))));
}

}  // namespace ollie
