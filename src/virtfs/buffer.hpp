#pragma once
/// Buffer: the bytes a fid holds for a handler that runs later (a Write payload, a pending Rdwr
/// request, a stream's filter). Capped per fid (spec §1.7), charged to the connection's count
/// (p9::Fid::conn_buffered, shared by its fids) and to the process' count, so neither one fid,
/// nor thousands of them, nor thousands of connections pin unbounded memory. The charge leaves with the bytes: at take(), clear() and destruction (a fid
/// dropped without Tclunk). A connection's fids are served on its strand: the count needs no lock.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "lib9p/result.hpp"

namespace virtfs {

inline constexpr std::size_t MAX_WRITE = 16u << 20;          ///< per fid (spec §1.7)
inline constexpr std::size_t MAX_CONN_BUFFERED = 64u << 20;  ///< per connection, all its fids together
/// The refusal of a write past MAX_CONN_BUFFERED (MAX_WRITE's is `write too large`).
inline constexpr const char* conn_buffers_full = "write too large: 64 MiB already buffered on this connection";
inline constexpr std::size_t MAX_ALL_BUFFERED = 512u << 20;  ///< per process, all connections together
/// The refusal of a write past MAX_ALL_BUFFERED.
inline constexpr const char* all_buffers_full = "write too large: 512 MiB already buffered on this server";
/// The refusals of a read whose content (a snapshot, a reply) would pass the same counts.
inline constexpr const char* conn_reads_full = "read too large: 64 MiB already held on this connection";
inline constexpr const char* all_reads_full = "read too large: 512 MiB already held on this server";

/// Bytes charged to a connection's count and the process' count, or none; released when it
/// goes. The hostowner's connections are charged to their own count only: filling the process'
/// count from other principals' connections must not refuse the hostowner's `stop` or `kill`.
class Charge {
 public:
  Charge() = default;
  /// `n` bytes more; refused past either cap (the charge is then unchanged).
  p9::Status add(const std::shared_ptr<std::size_t>& conn, bool hostowner, std::size_t n, const char* conn_full,
                 const char* all_full);
  /// Releases all of it.
  void clear();
  ~Charge() { clear(); }
  Charge(const Charge&) = delete;
  Charge& operator=(const Charge&) = delete;

 private:
  std::shared_ptr<std::size_t> conn_;
  bool hostowner_ = false;
  std::size_t bytes_ = 0;
};

class Buffer {
 public:
  /// conn: the connection's count; null when the connection keeps none.
  explicit Buffer(std::shared_ptr<std::size_t> conn, bool hostowner = false)
      : conn_(std::move(conn)), hostowner_(hostowner) {}
  ~Buffer() { clear(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  /// Appends, or refuses past either cap and keeps what it had.
  p9::Status append(std::string_view data);
  /// Hands the bytes over and releases their charge.
  std::string take();
  void clear() { (void)take(); }
  bool empty() const { return bytes_.empty(); }
  std::string_view view() const { return bytes_; }

 private:
  std::shared_ptr<std::size_t> conn_;
  bool hostowner_;
  Charge charge_;
  std::string bytes_;
};

}  // namespace virtfs
