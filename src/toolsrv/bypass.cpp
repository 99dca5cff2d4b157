#include "toolsrv/bypass.hpp"

#include <algorithm>
#include <charconv>

#include "toolsrv/json.hpp"

namespace toolsrv {

BypassBroker::BypassBroker(std::chrono::seconds timeout) : timeout_(timeout), timer_([this] { timer_loop(); }) {}

BypassBroker::~BypassBroker() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  timer_.join();
}

std::uint64_t BypassBroker::append_locked(std::string text, std::uint64_t request) {
  const auto seq = next_seq_++;
  log_.push_back({seq, request, std::move(text) + "\n"});
  while (log_.size() > bypass_log_max) {
    dropped_below_ = log_.front().seq + 1;
    log_.pop_front();
  }
  return seq;
}

void BypassBroker::end_locked(std::uint64_t id, const char* reason) {
  std::erase_if(log_, [id](const Line& l) { return l.request == id; });
  if (reason) append_locked(json_text({{"id", std::to_string(id)}, {"resolved", "deny"}, {"reason", reason}}));
}

std::uint64_t BypassBroker::request(const std::string& agent, const std::string& tool, const nlohmann::json& args,
                                    const std::string& cwd, bool background,
                                    std::function<void(BypassDecision)> decided) {
  std::uint64_t id;
  {
    std::lock_guard lock(mu_);
    if (pending_.size() >= bypass_pending_max) return 0;
    id = next_id_++;
    const auto line = json_text({{"id", std::to_string(id)}, {"agent", agent}, {"tool", tool},
                                 {"args", args},            {"cwd", cwd},     {"background", background}});
    const auto seq = append_locked(line, id);
    pending_.emplace(id, Pending{seq, line, std::chrono::steady_clock::now() + timeout_, std::move(decided)});
  }
  cv_.notify_all();
  notifier_.notify();
  return id;
}

p9::Result<void> BypassBroker::resolve(std::string_view text) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty()) continue;
    const auto sp = line.find_first_of(" \t");
    if (sp == std::string_view::npos) return p9::error("bad resolve line: " + std::string(line));
    const auto id_text = line.substr(0, sp);
    auto verb = line.substr(sp + 1);
    while (!verb.empty() && (verb.front() == ' ' || verb.front() == '\t')) verb.remove_prefix(1);
    if (verb != "allow" && verb != "deny") return p9::error("bad resolve line: " + std::string(line));
    std::uint64_t id = 0;
    const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    std::function<void(BypassDecision)> decided;
    {
      std::lock_guard lock(mu_);
      const auto it = ec == std::errc{} && end == id_text.data() + id_text.size() ? pending_.find(id) : pending_.end();
      if (it == pending_.end()) return p9::error("no such request: " + std::string(id_text));
      decided = std::move(it->second.decided);
      pending_.erase(it);
      end_locked(id, nullptr);
    }
    decided({verb == "allow", ""});
  }
  return {};
}

bool BypassBroker::withdraw(std::uint64_t id) {
  {
    std::lock_guard lock(mu_);
    if (pending_.erase(id) == 0) return false;
    end_locked(id, "withdrawn");
  }
  notifier_.notify();
  return true;
}

BypassBroker::Reader BypassBroker::open_pending() const {
  std::lock_guard lock(mu_);
  Reader r;
  for (const auto& [id, p] : pending_) r.backlog += p.line + "\n";
  r.next_seq = next_seq_;
  return r;
}

std::string BypassBroker::read_pending(Reader& reader) const {
  std::string out = std::move(reader.backlog);
  reader.backlog.clear();
  std::lock_guard lock(mu_);
  if (reader.next_seq < dropped_below_) {  // behind the cap: the requests it missed that still matter
    for (const auto& [id, p] : pending_)
      if (p.seq >= reader.next_seq && p.seq < dropped_below_) out += p.line + "\n";
  }
  for (const auto& l : log_)
    if (l.seq >= reader.next_seq) out += l.text;
  reader.next_seq = next_seq_;
  return out;
}

void BypassBroker::timer_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    auto next = std::chrono::steady_clock::time_point::max();
    for (const auto& [id, p] : pending_) next = std::min(next, p.deadline);
    if (next == std::chrono::steady_clock::time_point::max()) cv_.wait(lock);
    else cv_.wait_until(lock, next);
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::function<void(BypassDecision)>> expired;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        end_locked(it->first, "timeout");
        expired.push_back(std::move(it->second.decided));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    if (expired.empty()) continue;
    lock.unlock();
    notifier_.notify();
    for (auto& fn : expired) fn({false, "timeout"});
    lock.lock();
  }
}

}  // namespace toolsrv
