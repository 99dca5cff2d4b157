#include "limit.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <string>

namespace shell {

namespace {

bool safe_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

bool number(const std::string& s, std::time_t& out) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = static_cast<std::time_t>(std::stoll(s));
  return true;
}

}  // namespace

Limit::Limit() {
  const char* dir = std::getenv("TMPDIR");
  const char* id = std::getenv("OLLIE_AGENT_ID");
  if (!dir || !*dir || !id || !safe_id(id)) return;
  const std::string path = std::string(dir) + "/ollie-shell-" + id;
  // The session's TMPDIR is every agent's to write: what another planted there (a FIFO, a file it
  // keeps locked) must not hold this call up. Nonblocking, a regular file, a bounded wait.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd_ < 0) return;
  struct stat st {};
  bool locked = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  if (locked) {
    locked = false;
    for (int i = 0; i < 200 && !(locked = ::flock(fd_, LOCK_EX | LOCK_NB) == 0); i++) ::usleep(10000);
  }
  if (!locked) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  std::string text;
  char buf[512];
  ssize_t n;
  while (text.size() < 4096 && (n = ::read(fd_, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::time_t t;
    if (line.rfind("until ", 0) == 0 && number(line.substr(6), t)) {
      until_ = t;
    } else if (number(line, t)) {
      if (count_ == max_refusals) std::copy(times_ + 1, times_ + max_refusals, times_), count_--;
      times_[count_++] = t;
    } else {  // corrupt: start afresh
      until_ = 0, count_ = 0;
      break;
    }
  }
}

Limit::~Limit() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

std::time_t Limit::blocked_for(std::time_t now) const { return until_ > now ? until_ - now : 0; }

bool Limit::refused(std::time_t now) {
  int kept = 0;  // the refusals of the last minute, this one included
  for (int i = 0; i < count_; i++)
    if (times_[i] > now - refusal_window && times_[i] <= now) times_[kept++] = times_[i];
  if (kept == max_refusals) std::copy(times_ + 1, times_ + max_refusals, times_), kept--;
  times_[kept++] = now;
  count_ = kept;
  const bool block = count_ >= max_refusals;
  if (block) until_ = now + block_time, count_ = 0;
  save();
  return block;
}

void Limit::save() {
  if (fd_ < 0) return;
  std::string text;
  if (until_ > 0) text += "until " + std::to_string(until_) + "\n";
  for (int i = 0; i < count_; i++) text += std::to_string(times_[i]) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, text.data(), text.size(), 0);
}

}  // namespace shell
