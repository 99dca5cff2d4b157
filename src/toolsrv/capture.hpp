#pragma once
/// Capture: one output stream kept as its head and its tail (spec §6.5.2): the first `head_cap`
/// bytes, then a ring of the last `tail_cap` bytes of what comes past them.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace toolsrv {

/// First 10 MiB of every stream are kept (spec §6.5.2).
inline constexpr std::size_t output_head_cap = 10u << 20;
/// And the last 64 KiB past them.
inline constexpr std::size_t output_tail_cap = 64u << 10;

class Capture {
 public:
  /// The caps are parameters only so tests can use small ones.
  explicit Capture(std::size_t head_cap = output_head_cap, std::size_t tail_cap = output_tail_cap);

  /// Appends bytes; never blocks, memory stays below head_cap + 2 * tail_cap.
  void append(std::string_view data);

  /// Bytes seen in total (including those dropped).
  std::uint64_t total() const { return total_; }

  /// The head kept so far (a stable prefix of the rendered stream).
  const std::string& head() const { return head_; }

  /// The stream as sent: everything when it fits, else head, omission line, tail.
  std::string render() const;

  /// Size of render() without building it.
  std::size_t rendered_size() const;

  /// Forgets every byte and gives back the memory that held them. Assigning an empty Capture
  /// does not: libstdc++ copies a short string into the buffer the target has, and keeps it.
  void release();
  /// Bytes of memory the kept output holds.
  std::size_t held() const { return head_.capacity() + tail_.capacity(); }

 private:
  std::string omission_line() const;
  std::size_t head_cap_;
  std::size_t tail_cap_;
  std::string head_;
  std::string tail_;  // the last tail_cap_ bytes past the head live at its end
  std::uint64_t total_ = 0;
};

}  // namespace toolsrv
