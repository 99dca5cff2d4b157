#pragma once
/// From the model's tool calls to the calls toolsrv runs (spec §6.8, §8.3.1, §8.3.4, §8.3.5):
/// the dispatch flags, the model-side errors, batching by scope, unknown tools, and the history
/// rule that every call has its result or neither is kept.

#include <optional>
#include <string>
#include <vector>

#include "backend/types.hpp"
#include "store.hpp"
#include "toolhost.hpp"

namespace ollie {

/// One call of a response, ready to dispatch.
struct Call {
  std::string id, name;
  std::string args = "{}";     ///< the arguments toolsrv gets: the JSON object without dispatch flags
  std::string block_args;      ///< the `call` block's content: the arguments as compact JSON, flags kept
  bool args_ok = false;        ///< the arguments parse as a JSON object
  bool args_json = false;      ///< they parse as JSON at all (§8.2: what is cut off at the token limit does not)
  bool unknown = false;        ///< not among the agent's loaded tools
  std::string scope = "read", tier = "hot", format;
  std::optional<int> timeout;  ///< the `timeout` flag
  bool background = false;     ///< the `background` flag: proc/new.bg, no lock (§6.10), batched by its scope
  bool bypass = false;         ///< the `bypass` flag: run unsandboxed once approved (§6.9)
  std::string path;            ///< the `path` argument made absolute and clean ("" = none)
  std::string within;          ///< what a read is about, for the result cache: `path`, else the cwd
  std::optional<std::string> preset;  ///< a result decided without running anything
  std::optional<ToolOutcome> result;
};

/// Parses a call against the loaded tools: flags removed and checked (`error: invalid timeout:
/// <x>` ...), `error: empty tool name`, `error: invalid arguments: <reason>` as presets.
Call make_call(const backend::ToolCall& tc, const std::string& cwd, const std::vector<ToolInfo>& tools);

/// §8.3.5: `error: unknown tool: <name>` with `; it exists but is not loaded: call tool_load with
/// <name> first` or `; did you mean: a, b?` from the catalog.
std::string unknown_tool(const std::string& name, const std::vector<ToolInfo>& catalog);

/// §8.3.1's batches, in order.
std::vector<std::vector<Call>> split_batches(std::vector<Call> calls);

/// A tool's parameter schema with the four dispatch flags of §6.8 added.
std::string with_dispatch_flags(const std::string& parameters);

/// `path` absolute against `cwd` and cleaned lexically (no symlinks resolved).
std::string clean_path(const std::string& path, const std::string& cwd);

}  // namespace ollie
