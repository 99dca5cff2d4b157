#include "virtfs/buffer.hpp"

#include <atomic>
#include <utility>

#include "lib9p/errors.hpp"

namespace virtfs {
namespace {

// Every buffer of the process: connections are many (a tool can open thousands), each capped.
std::atomic<std::size_t> all_buffered{0};

}  // namespace

p9::Status Charge::add(const std::shared_ptr<std::size_t>& conn, bool hostowner, std::size_t n, const char* conn_full,
                       const char* all_full) {
  if (conn && *conn + n > MAX_CONN_BUFFERED) return p9::error(conn_full);
  if (!hostowner) {
    if (all_buffered.fetch_add(n) + n > MAX_ALL_BUFFERED) {
      all_buffered.fetch_sub(n);
      return p9::error(all_full);
    }
  }
  if (conn) *conn += n;
  conn_ = conn;
  hostowner_ = hostowner;
  bytes_ += n;
  return {};
}

void Charge::clear() {
  if (conn_) *conn_ -= bytes_;
  if (!hostowner_) all_buffered.fetch_sub(bytes_);
  bytes_ = 0;
}

p9::Status Buffer::append(std::string_view data) {
  if (bytes_.size() + data.size() > MAX_WRITE) return p9::error(p9::err::write_too_large);
  if (auto st = charge_.add(conn_, hostowner_, data.size(), conn_buffers_full, all_buffers_full); !st) return st;
  bytes_ += data;
  return {};
}

std::string Buffer::take() {
  charge_.clear();
  return std::exchange(bytes_, {});
}

}  // namespace virtfs
