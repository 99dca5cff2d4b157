#pragma once
/// What root `ctl invalidate` drops besides backends.conf and the agents' context lengths
/// (spec §3.1): each backend's model list, the models' context lengths, the profile list and the
/// global tool catalog, kept from their first read on (spec §2.1).

#include <asio/awaitable.hpp>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lib9p/result.hpp"
#include "memo.hpp"

namespace ollie {

struct Hub;

struct Caches {
  Caches();
  /// By backend name, one for every supported backend (never inserted into later).
  std::map<std::string, Memo<std::vector<std::string>>, std::less<>> models;
  Memo<std::string> agents;  ///< the root `agents` text
  Memo<std::string> tools;   ///< the root `tools` text
  /// A model's context length (§8.5.1), asked of its provider by the first agent of that backend
  /// and model that needs it: the agents after it, sub-agents above all, share that ask.
  Memo<int> context_length(const std::string& backend, const std::string& model) const;
  void drop() const;

 private:
  mutable std::mutex mu_;
  mutable std::map<std::pair<std::string, std::string>, Memo<int>> lengths_;
};

/// The models of backend `name`, sorted (root `models`, agent ctl `models`): the backend
/// resolved from backends.conf and the environment and asked on the hub's blocking pool, once
/// until root `invalidate`; its answer or its error (`<backend>: missing key: set <VAR>`, the
/// provider's error) is kept. An unknown name is check_backend's error.
asio::awaitable<p9::Result<std::vector<std::string>>> backend_models(Hub& hub, const std::string& name);
/// Starts the fetch of backend_models without waiting for it.
void prefetch_models(Hub& hub, const std::string& name);

}  // namespace ollie
