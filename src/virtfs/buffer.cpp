#include "virtfs/buffer.hpp"

#include <utility>

#include "lib9p/errors.hpp"

namespace virtfs {

p9::Status Buffer::append(std::string_view data) {
  if (bytes_.size() + data.size() > MAX_WRITE) return p9::error(p9::err::write_too_large);
  if (conn_) {
    if (*conn_ + data.size() > MAX_CONN_BUFFERED) return p9::error(conn_buffers_full);
    *conn_ += data.size();
  }
  bytes_ += data;
  return {};
}

std::string Buffer::take() {
  if (conn_) *conn_ -= bytes_.size();
  return std::exchange(bytes_, {});
}

}  // namespace virtfs
