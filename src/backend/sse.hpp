#pragma once
/// A Server-Sent Events parser (WHATWG "event stream" interpretation) fed with arbitrary
/// chunks: a line, a UTF-8 sequence or a JSON value may be cut anywhere between two reads.

#include <cstddef>
#include <string>
#include <string_view>

#include "backend/limits.hpp"

namespace ollie::backend {

class SseParser {
 public:
  /// The most data one event may carry, and the longest line: more fails the stream instead
  /// of growing memory.
  static constexpr std::size_t max_event = limits::event_data;

  /// Feeds bytes; calls `on_event(event, data)` for every complete event ("message" when the
  /// event has no `event:` field). Returns false (and stays failed) when a line or the data
  /// of one event exceeds max_event.
  template <class F>
  bool feed(std::string_view in, F&& on_event);

 private:
  template <class F>
  bool line(std::string_view l, F& on_event);

  std::string partial_;
  std::string event_;
  std::string data_;
  bool has_data_ = false;
  bool skip_lf_ = false;
  bool started_ = false;
  bool failed_ = false;
};

template <class F>
bool SseParser::feed(std::string_view in, F&& on_event) {
  if (failed_) return false;
  if (!started_ && !in.empty()) {
    if (partial_.empty() && in.substr(0, 3) == "\xEF\xBB\xBF") in.remove_prefix(3);
    started_ = true;
  }
  if (skip_lf_ && !in.empty()) {
    if (in.front() == '\n') in.remove_prefix(1);
    skip_lf_ = false;
  }
  while (!in.empty()) {
    std::size_t i = 0;
    while (i < in.size() && in[i] != '\n' && in[i] != '\r') ++i;
    if (i == in.size()) {
      failed_ = partial_.size() + in.size() > max_event;
      if (failed_) return false;
      partial_.append(in);
      return true;
    }
    const bool cr = in[i] == '\r';
    bool ok;
    if (partial_.empty()) {
      ok = line(in.substr(0, i), on_event);
    } else {
      partial_.append(in.substr(0, i));
      ok = partial_.size() <= max_event && line(partial_, on_event);
      partial_.clear();
    }
    if (!ok) {
      failed_ = true;
      return false;
    }
    in.remove_prefix(i + 1);
    if (cr) {
      if (in.empty()) skip_lf_ = true;
      else if (in.front() == '\n') in.remove_prefix(1);
    }
  }
  return true;
}

template <class F>
bool SseParser::line(std::string_view l, F& on_event) {
  if (l.empty()) {
    if (has_data_) on_event(std::string_view(event_.empty() ? "message" : event_), std::string_view(data_));
    event_.clear();
    data_.clear();
    has_data_ = false;
    return true;
  }
  if (l.front() == ':') return true;
  const auto colon = l.find(':');
  const auto field = l.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (data_.size() + 1 + value.size() > max_event) return false;
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }
  return true;
}

}  // namespace ollie::backend
