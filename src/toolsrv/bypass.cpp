#include "toolsrv/bypass.hpp"

#include <charconv>

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

void BypassBroker::append_locked(std::string line) { log_.push_back(std::move(line) + "\n"); }

std::uint64_t BypassBroker::request(const std::string& agent, const std::string& tool, const nlohmann::json& args,
                                    const std::string& cwd, bool background,
                                    std::function<void(BypassDecision)> decided) {
  std::uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    nlohmann::json j = {{"id", std::to_string(id)}, {"agent", agent}, {"tool", tool},
                        {"args", args},            {"cwd", cwd},     {"background", background}};
    Pending p{j.dump(), std::chrono::steady_clock::now() + timeout_, std::move(decided)};
    append_locked(p.line);
    pending_.emplace(id, std::move(p));
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
    }
    decided({verb == "allow", ""});
  }
  return {};
}

bool BypassBroker::withdraw(std::uint64_t id) {
  {
    std::lock_guard lock(mu_);
    if (pending_.erase(id) == 0) return false;
    append_locked(nlohmann::json{{"id", std::to_string(id)}, {"resolved", "deny"}, {"reason", "withdrawn"}}.dump());
  }
  notifier_.notify();
  return true;
}

BypassBroker::Reader BypassBroker::open_pending() const {
  std::lock_guard lock(mu_);
  Reader r;
  for (const auto& [id, p] : pending_) r.backlog += p.line + "\n";
  r.next_line = log_.size();
  return r;
}

std::string BypassBroker::read_pending(Reader& reader) const {
  std::string out = std::move(reader.backlog);
  reader.backlog.clear();
  std::lock_guard lock(mu_);
  for (; reader.next_line < log_.size(); ++reader.next_line) out += log_[reader.next_line];
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
        append_locked(nlohmann::json{{"id", std::to_string(it->first)}, {"resolved", "deny"}, {"reason", "timeout"}}.dump());
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
