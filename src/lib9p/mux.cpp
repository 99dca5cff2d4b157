#include "mux.hpp"

#include "codec.hpp"
#include "errors.hpp"

namespace p9 {

Fcall Mux::version_request(std::uint32_t msize) {
  limit_ = msize;
  Fcall t;
  t.type = Tversion;
  t.msize = msize;
  t.version = VERSION9P;
  return t;
}

Status Mux::version_reply(const Result<Fcall>& r) {
  if (!r) return r.error();
  if (r->version != VERSION9P) return error("server speaks " + r->version + ", not 9P2000");
  if (r->msize < MIN_MSIZE || r->msize > limit_) return error("bad msize from server: " + std::to_string(r->msize));
  msize_ = r->msize;
  limit_ = r->msize;
  return {};
}

std::uint16_t Mux::free_tag() {
  while (pending_.contains(next_tag_) || next_tag_ == NOTAG) next_tag_++;
  return next_tag_++;
}

Status Mux::start(Fcall& t, Done done, std::vector<std::uint8_t>& out) {
  Status refused;
  {
    std::lock_guard lk(mu_);
    if (closed_) refused = error(why_);
    // A Tclunk has room beyond the cap, as at the server (twice): refused, its fid would be
    // taken for free here while the server still held it, and its number reused (`duplicate fid`).
    else if (pending_.size() >= (t.type == Tclunk ? 2 * MAX_IN_FLIGHT : MAX_IN_FLIGHT))
      refused = error("too many requests in flight");
    else {
      t.tag = t.type == Tversion ? NOTAG : free_tag();
      if (auto st = encode(t, out); !st) {
        refused = st;  // a string over 65535 bytes: never sent
      } else {
        pending_[t.tag] = Pending{t.type, std::move(done)};
        return {};
      }
    }
  }
  t.tag = NOTAG;
  done(refused.error());
  return refused;
}

void Mux::flush(std::uint16_t oldtag, std::function<void()> settled, std::vector<std::uint8_t>& out) {
  {
    std::lock_guard lk(mu_);
    auto it = pending_.find(oldtag);
    if (it != pending_.end() && !closed_) {
      if (settled) it->second.settled.push_back(std::move(settled));
      if (it->second.flushing) return;
      it->second.flushing = true;
      Fcall t;
      t.type = Tflush;
      t.tag = free_tag();
      t.oldtag = oldtag;
      pending_[t.tag] = Pending{Tflush, nullptr, oldtag};
      (void)encode(t, out);  // a Tflush always encodes
      return;
    }
  }
  if (settled) settled();
}

Status Mux::received(std::span<const std::uint8_t> bytes) {
  in_.insert(in_.end(), bytes.begin(), bytes.end());
  std::size_t at = 0;
  Status st;
  for (;;) {
    std::span<const std::uint8_t> unread{in_.data() + at, in_.size() - at};
    auto f = frame_at(unread, limit_);
    if (f.kind == Framing::More) break;
    if (f.kind != Framing::Whole) {  // the server's frames are never over the msize it agreed to
      st = error("bad frame size from server: " + std::to_string(f.size));
      break;
    }
    auto r = decode(unread.first(f.size));
    at += f.size;
    if (!r) {
      st = error("bad reply from server: " + r.ename());
      break;
    }
    deliver(std::move(*r));
  }
  in_.erase(in_.begin(), in_.begin() + at);
  return st;
}

void Mux::deliver(Fcall r) {
  Done done;
  std::vector<std::function<void()>> settled;
  Result<Fcall> result = error(err::interrupted);
  {
    std::lock_guard lk(mu_);
    auto it = pending_.find(r.tag);
    if (it == pending_.end()) return;  // not ours: nothing waits for it
    if (it->second.type == Tflush) {   // any reply to a Tflush ends it (flush(5): never Rerror)
      auto old = pending_.find(it->second.oldtag);
      pending_.erase(it);
      if (old == pending_.end()) return;
      done = std::move(old->second.done);
      settled = std::move(old->second.settled);
      pending_.erase(old);
    } else {
      auto& p = it->second;
      if (r.type == Rerror) result = error(r.ename);
      else if (r.type != p.type + 1)
        result = error(std::string("bad reply from server: ") + type_name(r.type) + " to " + type_name(p.type));
      else result = std::move(r);
      done = std::move(p.done);
      p.done = nullptr;
      if (!p.flushing) pending_.erase(it);  // a flushed tag stays taken until its Rflush
    }
  }
  if (done) done(std::move(result));
  for (auto& s : settled) s();
}

void Mux::close(const std::string& why) {
  std::map<std::uint16_t, Pending> pending;
  std::string reason;
  {
    std::lock_guard lk(mu_);
    if (!closed_) {
      closed_ = true;
      why_ = why;
    }
    reason = why_;
    pending.swap(pending_);
  }
  for (auto& [tag, p] : pending) {
    if (p.done) p.done(error(reason));
    for (auto& s : p.settled) s();
  }
}

std::uint32_t Mux::new_fid() {
  std::lock_guard lk(mu_);
  if (!free_fids_.empty()) {
    auto f = free_fids_.back();
    free_fids_.pop_back();
    return f;
  }
  return next_fid_++;
}

void Mux::release_fid(std::uint32_t fid) {
  std::lock_guard lk(mu_);
  free_fids_.push_back(fid);
}

}  // namespace p9
