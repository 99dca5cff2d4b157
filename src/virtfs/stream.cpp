#include "stream.hpp"

namespace virtfs {

p9::Status Cursor::request(std::string_view) { return p9::error("requests not supported"); }

asio::awaitable<Chunk> Cursor::wait(std::size_t max) {
  auto sig = signal();
  for (;;) {
    auto ver = sig->version();
    Chunk c = read(max);
    if (!c.data.empty() || c.eof) co_return c;
    co_await sig->wait(ver);
  }
}

void ByteLog::append(std::string_view b) {
  if (b.empty()) return;
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    bytes_.append(b);
  }
  signal_->notify();
}

void ByteLog::close() {
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    closed_ = true;
  }
  signal_->notify();
}

std::uint64_t ByteLog::size() const {
  std::lock_guard lk(mu_);
  return bytes_.size();
}

bool ByteLog::closed() const {
  std::lock_guard lk(mu_);
  return closed_;
}

Chunk ByteLog::read(std::uint64_t from, std::size_t max) const {
  std::lock_guard lk(mu_);
  Chunk c;
  if (from < bytes_.size()) c.data = bytes_.substr(from, max);
  c.eof = closed_ && from + c.data.size() >= bytes_.size();
  return c;
}

namespace {

class LogCursor : public Cursor {
 public:
  LogCursor(std::shared_ptr<ByteLog> log, std::uint64_t pos) : log_(std::move(log)), pos_(pos) {}
  Chunk read(std::size_t max) override {
    Chunk c = log_->read(pos_, max);
    pos_ += c.data.size();
    return c;
  }
  std::shared_ptr<Signal> signal() override { return log_->signal(); }

 private:
  std::shared_ptr<ByteLog> log_;
  std::uint64_t pos_;
};

}  // namespace

std::shared_ptr<Cursor> ByteLog::cursor(std::uint64_t from) {
  return std::make_shared<LogCursor>(shared_from_this(), std::min(from, size()));
}

}  // namespace virtfs
