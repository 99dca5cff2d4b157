#pragma once
/// A one-way alarm between threads that a blocking poll(2) can wait on with its other descriptors:
/// raised once, readable from then on.

#include <sys/eventfd.h>
#include <unistd.h>
#include <cstdint>

namespace ollie {

struct EventFd {
  int fd = ::eventfd(0, EFD_CLOEXEC);
  EventFd() = default;
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  ~EventFd() {
    if (fd >= 0) ::close(fd);
  }
  void raise() const {
    const std::uint64_t one = 1;
    if (fd >= 0) (void)!::write(fd, &one, sizeof one);
  }
};

}  // namespace ollie
