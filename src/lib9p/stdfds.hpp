#pragma once
/// Descriptors 0, 1 and 2 of a program started with one of them closed (`cmd >&-`). Left
/// closed, the first file or socket the program opens takes its number, and what the program
/// prints goes there: a client's output into its own 9P connection, as requests the server runs
/// with the client's rights. Each closed one gets /dev/null; when that cannot be opened the
/// program ends at once (status 1), since there is nowhere safe to say why.

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

namespace p9 {

inline void fill_standard_fds() {
  for (int fd = 0; fd <= 2; fd++) {
    if (::fcntl(fd, F_GETFD) >= 0) continue;
    // The lowest free number: this one, since the ones below are open by now.
    if (::open("/dev/null", O_RDWR) != fd) std::_Exit(1);
  }
}

}  // namespace p9
