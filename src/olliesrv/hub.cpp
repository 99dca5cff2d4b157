#include "hub.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "session.hpp"

namespace ollie {

void Hub::reload_conf() {
  auto c = backend::load_backends_conf(backend::backends_conf_path(env));
  std::lock_guard lock(mu);
  if (!c) {
    spdlog::error("backends.conf: {}", c.error().message);
    conf_ = {};
    return;
  }
  conf_ = std::move(*c);
}

// Names are indexed (restore adds 10,000 sessions: no scan per add). A session's name changes
// only under this lock (rename), so by_name_ and the sessions' names agree.
std::shared_ptr<Session> Hub::find(const std::string& key) const {
  std::lock_guard lock(mu);
  if (auto it = by_name_.find(key); it != by_name_.end()) return it->second;
  auto it = by_id_.find(key);
  return it == by_id_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Session>> Hub::sessions() const {
  std::lock_guard lock(mu);
  std::vector<std::shared_ptr<Session>> out;
  out.reserve(by_name_.size());
  for (const auto& [n, s] : by_name_) out.push_back(s);
  return out;
}

p9::Status Hub::add(std::shared_ptr<Session> s) {
  std::string n;
  {
    std::lock_guard sl(s->mu);
    n = s->name;
  }
  {
    std::lock_guard lock(mu);
    if (by_name_.count(n)) return p9::error("session already exists: " + n);
    by_name_[n] = s;
    by_id_[s->id] = s;
  }
  bypass.attach(s);
  return {};
}

void Hub::remove(const std::string& id) {
  std::shared_ptr<Session> gone;
  {
    std::lock_guard lock(mu);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return;
    gone = it->second;
    std::erase_if(by_name_, [&](const auto& kv) { return kv.second == it->second; });
    by_id_.erase(it);
  }
  bypass.detach(*gone);
}

p9::Status Hub::rename(const std::shared_ptr<Session>& s, const std::string& n) {
  std::lock_guard lock(mu);
  if (auto it = by_name_.find(n); it != by_name_.end()) {
    if (it->second == s) return {};
    return p9::error("session already exists: " + n);
  }
  std::lock_guard sl(s->mu);
  by_name_.erase(s->name);
  s->name = n;
  s->name_changed = std::time(nullptr);
  by_name_[n] = s;
  return {};
}

}  // namespace ollie
