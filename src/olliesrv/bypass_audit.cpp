#include "bypass_audit.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/post.hpp>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace ollie {

std::string rfc3339(std::int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

BypassAudit::BypassAudit(asio::thread_pool& pool, std::string path) : pool_(pool) { state_->path = std::move(path); }

void BypassAudit::append(nlohmann::json record) {
  nlohmann::json line = {{"time", rfc3339(std::time(nullptr))}};
  for (auto& [k, v] : record.items()) line[k] = std::move(v);
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  {
    std::lock_guard lock(state_->mu);
    if (state_->queue.size() >= max_queued) {
      state_->dropped++;
      return;
    }
    state_->queue.push_back(std::move(text));
    if (state_->writing) return;
    state_->writing = true;
  }
  asio::post(pool_, [s = state_] { drain(s); });
}

namespace {

bool write_all(int fd, const std::string& s) {
  std::size_t at = 0;
  while (at < s.size()) {
    const auto n = ::write(fd, s.data() + at, s.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

/// Opens the log for appending (0600, never through a symlink), rotating it first when `more`
/// bytes would take it past the bound.
int open_log(const std::string& path, std::size_t more) {
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    ::chmod(dir.c_str(), 0700);
  }
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
      static_cast<std::size_t>(st.st_size) + more > BypassAudit::max_size) {
    if (::rename(path.c_str(), (path + ".1").c_str()) != 0)
      spdlog::error("bypass audit: rotate {}: {}", path, std::strerror(errno));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0 && ::fchmod(fd, 0600) != 0) spdlog::error("bypass audit: chmod {}: {}", path, std::strerror(errno));
  return fd;
}

}  // namespace

void BypassAudit::drain(const std::shared_ptr<State>& s) {
  for (;;) {
    std::string batch;
    {
      std::lock_guard lock(s->mu);
      if (s->dropped) {
        s->queue.push_back("{\"dropped\":" + std::to_string(s->dropped) + "}\n");
        s->dropped = 0;
      }
      if (s->queue.empty()) {
        s->writing = false;
        return;
      }
      while (!s->queue.empty() && batch.size() < (1u << 20)) {
        batch += s->queue.front();
        s->queue.pop_front();
      }
    }
    write(s->path, batch);
  }
}

void BypassAudit::write(const std::string& path, const std::string& batch) {
  const int fd = open_log(path, batch.size());
  if (fd < 0 || !write_all(fd, batch)) spdlog::error("bypass audit: {}: {}", path, std::strerror(errno));
  if (fd >= 0) ::close(fd);
}

BypassAudit::~BypassAudit() {
  std::string rest;
  {
    std::lock_guard lock(state_->mu);
    for (auto& l : state_->queue) rest += l;
    state_->queue.clear();
  }
  if (!rest.empty()) write(state_->path, rest);
}

}  // namespace ollie
