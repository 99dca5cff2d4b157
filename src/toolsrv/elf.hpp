#pragma once
/// The shared objects an executable links (sandbox.yaml `advanced.ldd`, spec §7.3.1), read from
/// its ELF headers with libelf the way the dynamic loader finds them, without running anything:
/// `ldd` would run the loader named by a file the agent may have written, outside any sandbox.

#include <string>
#include <vector>

namespace toolsrv {

/// The ELF interpreter and every shared object `exe` needs, transitively, as absolute paths of
/// regular files: DT_NEEDED names searched in DT_RPATH/DT_RUNPATH ($ORIGIN expanded), the
/// directories of /etc/ld.so.conf (with its includes) and the default ones; an absolute DT_NEEDED
/// or PT_INTERP as written, if it is a regular file. An object inside one of `writable` (paths
/// the model can write, resolved) is neither returned nor read. Not an ELF file (a script):
/// nothing. A name found nowhere, a relative one, or one that is not a regular file is left out.
std::vector<std::string> linked_libraries(const std::string& exe, const std::vector<std::string>& writable = {});

}  // namespace toolsrv
