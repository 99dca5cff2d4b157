#include "virtfs/buffer.hpp"

#include <atomic>
#include <utility>

#include "lib9p/errors.hpp"

namespace virtfs {
namespace {

// Every buffer of the process: connections are many (a tool can open thousands), each capped.
std::atomic<std::size_t> all_buffered{0};

}  // namespace

p9::Status Buffer::append(std::string_view data) {
  if (bytes_.size() + data.size() > MAX_WRITE) return p9::error(p9::err::write_too_large);
  if (conn_ && *conn_ + data.size() > MAX_CONN_BUFFERED) return p9::error(conn_buffers_full);
  if (all_buffered.fetch_add(data.size()) + data.size() > MAX_ALL_BUFFERED) {
    all_buffered.fetch_sub(data.size());
    return p9::error(all_buffers_full);
  }
  if (conn_) *conn_ += data.size();
  bytes_ += data;
  return {};
}

std::string Buffer::take() {
  if (conn_) *conn_ -= bytes_.size();
  all_buffered.fetch_sub(bytes_.size());
  return std::exchange(bytes_, {});
}

}  // namespace virtfs
