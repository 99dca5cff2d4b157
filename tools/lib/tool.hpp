#pragma once
/// What every compiled tool shares (spec §6.6): the JSON arguments object on stdin, the result
/// on stdout, and one way to fail. A failure is one line of text on stdout and exit status 1, so
/// the model reads `error: exit status 1` followed by the reason (§8.3.4), and a person running
/// the tool by hand sees the same line.

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tool {

using json = nlohmann::json;

/// A reason the call cannot be done, for the model to read: what was wrong and, where it helps,
/// what to do instead.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The arguments object. Every getter names the argument in its error.
class Args {
 public:
  explicit Args(json object) : j_(std::move(object)) {}
  /// Parses stdin: not JSON, or not an object → Error `invalid arguments: <reason>`.
  static Args from_stdin();

  /// A required string: `missing argument: <key>`, `invalid <key>: must be a string`.
  std::string string(std::string_view key) const;
  std::optional<std::string> opt_string(std::string_view key) const;
  /// An integer in [min, max]: `invalid <key>: must be an integer from <min> to <max>`.
  std::optional<long long> opt_int(std::string_view key, long long min, long long max) const;
  bool flag(std::string_view key, bool fallback) const;
  bool has(std::string_view key) const { return j_.contains(std::string(key)) && !j_.at(std::string(key)).is_null(); }
  const json& raw() const { return j_; }

 private:
  json j_;
};

/// main() of a tool: parses the arguments, runs `body`, writes what it returns to stdout and
/// returns 0; an Error (or any other exception) is written as one line and returns 1.
int run(const std::function<std::string(const Args&)>& body);

/// `path` made absolute against the working directory (the call's cwd) and cleaned of `.`, `..`
/// and repeated slashes, without resolving symlinks, but for one a `..` follows (the parent of
/// its target, as the kernel takes it). Empty → Error `invalid path: empty`.
std::string absolute(std::string_view path);

}  // namespace tool
