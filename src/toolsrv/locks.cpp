#include "toolsrv/locks.hpp"

#include "toolsrv/paths.hpp"

namespace toolsrv {

LockRequest LockRequest::for_call(Scope scope, const nlohmann::json& args, const std::string& cwd) {
  LockRequest r;
  if (scope == Scope::read) {
    r.kind = Kind::none;
    return r;
  }
  if (scope == Scope::write && args.is_object() && args.contains("path") && args["path"].is_string()) {
    r.kind = Kind::write;
    // Cleaned first, as the file tools clean a path before they open it (tool::absolute): the
    // lock is on the file they write, `link/../x` being <cwd>/x for them.
    r.path = resolve_write_target(absolute_path(args["path"].get<std::string>(), cwd));
    return r;
  }
  r.kind = Kind::global;
  return r;
}

LockHold& LockHold::operator=(LockHold&& o) noexcept {
  if (this != &o) {
    release();
    table_ = std::move(o.table_);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

void LockHold::release() {
  if (id_ == 0) return;
  if (auto t = table_.lock()) t->release(id_);
  table_.reset();
  id_ = 0;
}

std::shared_ptr<LockTable> LockTable::create() { return std::shared_ptr<LockTable>(new LockTable()); }

bool LockTable::conflicts(const LockRequest& a, const LockRequest& b) {
  using K = LockRequest::Kind;
  if (a.kind == K::none || b.kind == K::none) return false;
  if (a.kind == K::global || b.kind == K::global) return true;
  return a.path == b.path;
}

std::uint64_t LockTable::acquire(LockRequest request, std::function<void(LockHold)> granted) {
  std::vector<std::pair<std::uint64_t, std::function<void(LockHold)>>> fire;
  std::uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    if (request.kind == LockRequest::Kind::none) {
      fire.emplace_back(0, std::move(granted));  // no entry: a read blocks nobody
    } else {
      waiting_.push_back({id, std::move(request), std::move(granted)});
      fire = grant_locked();
    }
  }
  for (auto& [hid, fn] : fire) fn(hid ? LockHold(weak_from_this(), hid) : LockHold());
  return id;
}

// Grants every waiter that conflicts with no holder and no earlier waiter (arrival order).
std::vector<std::pair<std::uint64_t, std::function<void(LockHold)>>> LockTable::grant_locked() {
  std::vector<std::pair<std::uint64_t, std::function<void(LockHold)>>> fire;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    bool blocked = false;
    for (const auto& h : held_) blocked = blocked || conflicts(h.req, it->req);
    for (auto e = waiting_.begin(); e != it && !blocked; ++e) blocked = conflicts(e->req, it->req);
    if (blocked) {
      ++it;
      continue;
    }
    fire.emplace_back(it->id, std::move(it->granted));
    held_.splice(held_.end(), waiting_, it++);
  }
  return fire;
}

bool LockTable::cancel(std::uint64_t ticket) {
  std::vector<std::pair<std::uint64_t, std::function<void(LockHold)>>> fire;
  bool found = false;
  {
    std::lock_guard lock(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if (it->id == ticket) {
        waiting_.erase(it);
        found = true;
        break;
      }
    }
    if (found) fire = grant_locked();  // a cancelled global may unblock later writes
  }
  for (auto& [hid, fn] : fire) fn(LockHold(weak_from_this(), hid));
  return found;
}

void LockTable::release(std::uint64_t id) {
  std::vector<std::pair<std::uint64_t, std::function<void(LockHold)>>> fire;
  {
    std::lock_guard lock(mu_);
    held_.remove_if([id](const Entry& e) { return e.id == id; });
    fire = grant_locked();
  }
  for (auto& [hid, fn] : fire) fn(LockHold(weak_from_this(), hid));
}

std::size_t LockTable::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_.size();
}

}  // namespace toolsrv
