#include "event.hpp"

#include <algorithm>

namespace ollie {

namespace {

/// The pattern as an error names it: cut, so that the Rerror stays short (§1.8).
p9::Error bad_pattern(std::string_view text) {
  constexpr std::size_t shown = 64;
  return p9::error("bad pattern: " + std::string(text.substr(0, shown)) + (text.size() > shown ? "…" : ""));
}

}  // namespace

p9::Result<Pattern> Pattern::parse(std::string_view text) {
  Pattern p;
  std::size_t segments = 0;
  for (std::size_t i = 0;; segments++) {
    auto j = text.find('.', i);
    std::string_view seg = text.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i);
    if (seg.empty() || (seg.find('*') != std::string_view::npos && seg != "*")) return bad_pattern(text);
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
  // Valid (§5.2), but longer than any topic or of more segments than any has: it matches
  // nothing, and is not kept split (4 million segments pinned hundreds of MB per fid).
  if (text.size() > MAX_BYTES || segments >= MAX_SEGMENTS) {
    p.never_ = true;
    return p;
  }
  for (std::size_t i = 0;;) {
    auto j = text.find('.', i);
    p.segs_.emplace_back(text.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
  return p;
}

bool Pattern::matches(const std::string& topic) const {
  if (never_) return false;
  std::size_t i = 0;
  for (std::size_t k = 0; k < segs_.size(); k++) {
    if (i > topic.size()) return false;
    auto j = topic.find('.', i);
    bool last = k + 1 == segs_.size();
    if (segs_[k] == "*" && last) return i < topic.size();  // one or more remaining segments
    std::string_view seg(topic.data() + i, (j == std::string::npos ? topic.size() : j) - i);
    if (segs_[k] != "*" && seg != segs_[k]) return false;
    if (last) return j == std::string::npos;
    if (j == std::string::npos) return false;
    i = j + 1;
  }
  return false;
}

void Bus::publish(const std::string& topic, const std::string& payload) {
  const auto e = std::make_shared<const Subscription::Event>(
      Subscription::Event{topic, payload.empty() ? topic + "\n" : topic + " " + payload + "\n"});
  std::vector<std::shared_ptr<Subscription>> live;
  {
    std::lock_guard lk(mu_);
    std::erase_if(subs_, [&](auto& w) {
      auto s = w.lock();
      if (!s) return true;
      live.push_back(std::move(s));
      return false;
    });
  }
  for (auto& s : live) s->offer(e);
}

p9::Result<std::shared_ptr<Subscription>> Bus::subscribe(const std::string& who, bool hostowner) {
  auto s = std::make_shared<Subscription>();
  std::lock_guard lk(mu_);
  if (!hostowner) {
    auto& held = held_[who];
    if (!held) held = std::make_shared<std::atomic<std::size_t>>(0);
    if (held->load() >= MAX_PER_PRINCIPAL)
      return p9::error("too many event fids (limit " + std::to_string(MAX_PER_PRINCIPAL) + ")");
    held->fetch_add(1);
    s->held_ = held;
  }
  // publish drops the ended ones; with no event for a while, a client opening and closing event
  // would pile them up (each holds its Subscription's memory): swept here once the list doubled.
  if (subs_.size() >= 2 * swept_) {
    std::erase_if(subs_, [](const auto& w) { return w.expired(); });
    std::erase_if(held_, [](const auto& h) { return h.second.use_count() == 1; });  // principals holding no fid
    swept_ = std::max<std::size_t>(subs_.size(), 64);
  }
  subs_.push_back(s);
  return s;
}

bool Subscription::wanted(const std::string& topic) const {
  if (filter_.empty()) return true;
  return std::any_of(filter_.begin(), filter_.end(), [&](auto& p) { return p.matches(topic); });
}

void Subscription::drop_unwanted() {
  std::erase_if(queue_, [&](const auto& e) { return !wanted(e->topic); });
}

void Subscription::offer(const std::shared_ptr<const Event>& e) {
  {
    std::lock_guard lk(mu_);
    if (started_ && !wanted(e->topic)) return;
    queue_.push_back(e);
    // Before the first read the filter may still be growing: what a later pattern would select
    // is kept, and only a full buffer gives up the events no pattern written so far selects.
    if (queue_.size() > Bus::BUFFER && !started_ && !filter_.empty()) drop_unwanted();
    if (queue_.size() > Bus::BUFFER) {
      queue_.pop_front();
      dropped_++;
    }
  }
  signal_->notify();
}

p9::Status Subscription::request(std::string_view text) {
  if (text.size() > MAX_FILTER) return p9::error("filter too long (limit " + std::to_string(MAX_FILTER / 1024) + " KiB)");
  std::vector<Pattern> pats;
  std::size_t i = 0;
  while (i < text.size()) {
    auto j = text.find_first_of(" \t\r\n", i);
    if (j == std::string_view::npos) j = text.size();
    if (j > i) {
      auto p = Pattern::parse(text.substr(i, j - i));
      if (!p) return p.error();
      if (pats.size() == MAX_PATTERNS) return p9::error("too many patterns (limit " + std::to_string(MAX_PATTERNS) + ")");
      pats.push_back(std::move(*p));
    }
    i = j + 1;
  }
  std::lock_guard lk(mu_);
  filter_ = std::move(pats);
  return {};
}

virtfs::Chunk Subscription::read(std::size_t max) {
  std::lock_guard lk(mu_);
  if (!started_) {  // the filter is whole: what it does not select goes
    started_ = true;
    drop_unwanted();
  }
  std::string out;
  if (!partial_.empty()) {  // the rest of a split line first: no line starts inside another
    out = partial_.substr(0, max);
    partial_.erase(0, out.size());
    if (!partial_.empty()) return {out, false};
  }
  if (dropped_) {  // taken by this read (whole, or split as any line): never left in the queue
    const std::string line = "event.overflow " + std::to_string(dropped_) + "\n";
    if (!out.empty() && out.size() + line.size() > max) return {out, false};  // it begins the next read
    queue_.push_front(std::make_shared<const Event>(Event{"event.overflow", line}));
    dropped_ = 0;
  }
  // Then as many whole lines as fit (§5.3).
  while (!queue_.empty() && out.size() + queue_.front()->line.size() <= max) {
    out += queue_.front()->line;
    queue_.pop_front();
  }
  if (out.empty() && !queue_.empty()) {  // a line longer than the read: split it
    partial_ = queue_.front()->line;
    queue_.pop_front();
    out = partial_.substr(0, max);
    partial_.erase(0, out.size());
  }
  return {out, false};
}

}  // namespace ollie
