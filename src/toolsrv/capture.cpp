#include "toolsrv/capture.hpp"

#include <algorithm>

namespace toolsrv {

Capture::Capture(std::size_t head_cap, std::size_t tail_cap) : head_cap_(head_cap), tail_cap_(tail_cap) {}

void Capture::release() {
  std::string().swap(head_);
  std::string().swap(tail_);
  total_ = 0;
}

void Capture::append(std::string_view data) {
  total_ += data.size();
  if (head_.size() < head_cap_) {
    const auto n = std::min(data.size(), head_cap_ - head_.size());
    head_.append(data.substr(0, n));
    data.remove_prefix(n);
  }
  if (data.empty()) return;
  if (data.size() >= tail_cap_) {
    tail_.assign(data.substr(data.size() - tail_cap_));
    return;
  }
  tail_.append(data);
  if (tail_.size() > 2 * tail_cap_) tail_.erase(0, tail_.size() - tail_cap_);
}

std::string Capture::omission_line() const {
  const auto omitted = total_ - head_.size() - std::min<std::uint64_t>(tail_.size(), tail_cap_);
  return "\n[\u2026 " + std::to_string(omitted) + " bytes omitted \u2026]\n";
}

std::string Capture::render() const {
  if (total_ <= head_cap_ + tail_cap_) return head_ + tail_;
  return head_ + omission_line() + tail_.substr(tail_.size() - tail_cap_);
}

std::size_t Capture::rendered_size() const {
  if (total_ <= head_cap_ + tail_cap_) return head_.size() + tail_.size();
  return head_.size() + omission_line().size() + tail_cap_;
}

}  // namespace toolsrv
