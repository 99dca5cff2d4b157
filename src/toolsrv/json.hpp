#pragma once
/// The JSON text toolsrv writes (bypass/pending lines, tool lists). Its strings come from outside
/// (agent ids, paths, tool names, arguments), so invalid UTF-8 in them is replaced by U+FFFD,
/// never thrown.

#include <string>

#include <nlohmann/json.hpp>

namespace toolsrv {

/// Members keep the order they were written in.
inline std::string json_text(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace toolsrv
