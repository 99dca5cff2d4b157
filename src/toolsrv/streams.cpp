#include "toolsrv/streams.hpp"

namespace toolsrv {
namespace {

// The part every cursor shares: a Signal notified by one pending core subscription.
class Watching : public virtfs::Cursor {
 public:
  std::shared_ptr<virtfs::Signal> signal() override { return signal_; }

 protected:
  // Arms a wake-up for the first change after `seen` (taken before the read that found nothing).
  template <class Source>
  void watch(Source& source, std::uint64_t seen) {
    sub_ = source.when_changed(seen, [sig = signal_] { sig->notify(); });
  }

 private:
  std::shared_ptr<virtfs::Signal> signal_ = std::make_shared<virtfs::Signal>();
  Subscription sub_;
};

class OutCursor : public Watching {
 public:
  explicit OutCursor(std::shared_ptr<Process> p) : proc_(std::move(p)) {}

  virtfs::Chunk read(std::size_t max) override {
    proc_->touch();
    const auto seen = proc_->version();
    auto c = proc_->read_out(pos_, max);
    pos_ += c.data.size();
    if (c.data.empty() && !c.eof) watch(*proc_, seen);
    return {std::move(c.data), c.eof};
  }

 private:
  std::shared_ptr<Process> proc_;
  std::uint64_t pos_ = 0;
};

class WaitCursor : public Watching {
 public:
  explicit WaitCursor(std::shared_ptr<Process> p) : proc_(std::move(p)) {}

  virtfs::Chunk read(std::size_t max) override {
    proc_->touch();
    const auto seen = proc_->version();
    if (!proc_->finished()) {
      watch(*proc_, seen);
      return {};
    }
    if (!text_) text_ = proc_->wait_text();
    auto data = pos_ < text_->size() ? text_->substr(pos_, max) : std::string();
    pos_ += data.size();
    return {std::move(data), pos_ >= text_->size()};
  }

 private:
  std::shared_ptr<Process> proc_;
  std::optional<std::string> text_;
  std::size_t pos_ = 0;
};

class PendingCursor : public Watching {
 public:
  explicit PendingCursor(BypassBroker& b) : broker_(b), reader_(b.open_pending()) {}

  virtfs::Chunk read(std::size_t max) override {
    if (buf_.empty()) {
      const auto seen = broker_.version();
      buf_ = broker_.read_pending(reader_);
      if (buf_.empty()) {
        watch(broker_, seen);
        return {};
      }
    }
    auto data = buf_.substr(0, max);
    buf_.erase(0, data.size());
    return {std::move(data), false};
  }

 private:
  BypassBroker& broker_;
  BypassBroker::Reader reader_;
  std::string buf_;
};

}  // namespace

std::shared_ptr<virtfs::Cursor> out_cursor(std::shared_ptr<Process> proc) { return std::make_shared<OutCursor>(std::move(proc)); }

std::shared_ptr<virtfs::Cursor> wait_cursor(std::shared_ptr<Process> proc) { return std::make_shared<WaitCursor>(std::move(proc)); }

std::shared_ptr<virtfs::Cursor> pending_cursor(BypassBroker& broker) { return std::make_shared<PendingCursor>(broker); }

}  // namespace toolsrv
