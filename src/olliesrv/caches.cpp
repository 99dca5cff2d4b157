#include "caches.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "backend/backend.hpp"
#include "hub.hpp"
#include "settings.hpp"

namespace ollie {

namespace {

bool printable(const std::string& s) {
  return !s.empty() && std::none_of(s.begin(), s.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
}

// Runs on the blocking pool: resolution may read the Kiro token database, listing is a fetch.
Memo<std::vector<std::string>>::Load model_load(Hub& hub, const std::string& name) {
  return [conf = hub.conf(), env = hub.env, &http = hub.http, name]() -> p9::Result<std::vector<std::string>> {
    auto settings = backend::resolve_backend(name, conf, env);
    if (!settings) return p9::error(settings.error().message);
    auto be = backend::make_backend(std::move(*settings), http);
    if (!be) return p9::error(be.error().message);
    auto listed = (*be)->list_models();
    if (!listed) {
      spdlog::info("models: {}", listed.error().message);
      return p9::error(listed.error().message);
    }
    // A name with a TAB or a newline would break the table; providers never send one.
    std::vector<std::string> v;
    for (auto& m : *listed)
      if (printable(m)) v.push_back(std::move(m));
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  };
}

}  // namespace

Caches::Caches() {
  for (const auto& b : backend::backend_names()) models.emplace(b, Memo<std::vector<std::string>>{});
}

Memo<int> Caches::context_length(const std::string& backend, const std::string& model) const {
  std::lock_guard lock(mu_);
  if (lengths_.size() >= 4096 && !lengths_.count({backend, model})) lengths_.clear();  // a bound: names come from cfg writes
  return lengths_[{backend, model}];  // shared with every copy
}

void Caches::drop() const {
  for (const auto& [name, m] : models) m.drop();
  agents.drop();
  tools.drop();
  std::lock_guard lock(mu_);
  lengths_.clear();
}

asio::awaitable<p9::Result<std::vector<std::string>>> backend_models(Hub& hub, const std::string& name) {
  auto it = hub.caches.models.find(name);
  if (it == hub.caches.models.end()) co_return check_backend(name).error();
  auto load = model_load(hub, name);
  co_return co_await it->second.get(hub.asks, std::move(load));
}

void prefetch_models(Hub& hub, const std::string& name) {
  if (auto it = hub.caches.models.find(name); it != hub.caches.models.end())
    it->second.prefetch(hub.asks, model_load(hub, name));
}

}  // namespace ollie
