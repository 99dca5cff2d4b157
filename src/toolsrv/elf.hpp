#pragma once
/// The shared objects an executable links (sandbox.yaml `advanced.ldd`, spec §7.3.1), read from
/// its ELF headers the way the dynamic loader finds them, without running anything: `ldd` would
/// run the loader named by a file the agent may have written, outside any sandbox.

#include <string>
#include <vector>

namespace toolsrv {

/// The ELF interpreter and every shared object `exe` needs, transitively, as absolute paths:
/// DT_NEEDED names searched in DT_RPATH/DT_RUNPATH ($ORIGIN expanded), the directories of
/// /etc/ld.so.conf (with its includes) and the default ones. Not an ELF file (a script), or
/// not a 64-bit little-endian one: nothing. A name found nowhere is left out.
std::vector<std::string> linked_libraries(const std::string& exe);

}  // namespace toolsrv
