#pragma once
/// A newline-delimited JSON framer fed with arbitrary chunks: hands over each complete,
/// non-blank line; a line cut between reads is held until its newline arrives.

#include <cstddef>
#include <string>
#include <string_view>

#include "backend/limits.hpp"

namespace ollie::backend {

class NdjsonParser {
 public:
  /// The longest line accepted.
  static constexpr std::size_t max_line = limits::event_data;

  /// Feeds bytes; calls `on_line(line)` for each complete non-blank line (without its
  /// newline or a trailing CR). Returns false when a line exceeds max_line.
  template <class F>
  bool feed(std::string_view in, F&& on_line);

  /// The unterminated rest at end of stream (some servers omit the last newline).
  template <class F>
  void finish(F&& on_line);

 private:
  std::string partial_;
};

template <class F>
bool NdjsonParser::feed(std::string_view in, F&& on_line) {
  while (!in.empty()) {
    const auto nl = in.find('\n');
    if (nl == std::string_view::npos) {
      if (partial_.size() + in.size() > max_line) return false;
      partial_.append(in);
      return true;
    }
    std::string_view l;
    if (partial_.empty()) {
      l = in.substr(0, nl);
    } else {
      if (partial_.size() + nl > max_line) return false;
      partial_.append(in.substr(0, nl));
      l = partial_;
    }
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.find_first_not_of(" \t") != std::string_view::npos) on_line(l);
    partial_.clear();
    in.remove_prefix(nl + 1);
  }
  return true;
}

template <class F>
void NdjsonParser::finish(F&& on_line) {
  std::string rest;
  rest.swap(partial_);
  if (rest.find_first_not_of(" \t\r") != std::string::npos) on_line(std::string_view(rest));
}

}  // namespace ollie::backend
