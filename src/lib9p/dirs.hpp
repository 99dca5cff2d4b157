#pragma once
/// Where a user's files are: HOME, the XDG base directories, Ollie's config, data and runtime
/// roots, and plan9port's namespace directory (spec §1.4, §6.1, §7.1, §7.3.2). The one place
/// both daemons, the clients and the backends resolve them, with one set of fallbacks. Each
/// function reads an environment (the process's by default; tests pass their own). An empty
/// variable counts as unset.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "result.hpp"

namespace p9 {

using Env = std::function<std::optional<std::string>(std::string_view name)>;

/// The process environment; empty values read as unset.
Env process_env();

/// The login name of the real uid, from the password database (what plan9port's 9p sends).
std::string login_name();

/// $HOME, else the password database's home directory, else `/`.
std::string home_dir(const Env& env = process_env());
/// `path` with a leading `~` or `~/` replaced by home_dir(env); any other path as it is.
std::string expand_home(const std::string& path, const Env& env = process_env());

/// $XDG_CONFIG_HOME, $XDG_DATA_HOME, $XDG_CACHE_HOME, $XDG_STATE_HOME, else ~/.config,
/// ~/.local/share, ~/.cache, ~/.local/state.
std::string config_home(const Env& env = process_env());
std::string data_home(const Env& env = process_env());
std::string cache_home(const Env& env = process_env());
std::string state_home(const Env& env = process_env());
/// $XDG_RUNTIME_DIR, else /run/user/<uid> (the `{XDG_RUNTIME_DIR}` template only: sockets and
/// private temporary directories live under runtime_root()).
std::string runtime_home(const Env& env = process_env());

/// Ollie's config root `<config_home>/ollie` and data root `<data_home>/ollie` (spec §7.1).
std::string config_root(const Env& env = process_env());
std::string data_root(const Env& env = process_env());
/// `$XDG_RUNTIME_DIR/ollie`, else `/tmp/ollie-<uid>`: toolsrv sockets, forwards, each session's
/// TMPDIR. The fallback lies in the shared /tmp: make directories below it with
/// ensure_runtime_dir(), which checks it.
std::string runtime_root(const Env& env = process_env());

/// The plan9port namespace directory: $NAMESPACE, else /tmp/ns.<login>.<canonical DISPLAY>
/// (DISPLAY ":0" when unset; a trailing ".0" dropped, '/' turned into '_').
std::string namespace_dir(const Env& env = process_env());

/// The directory a Unix socket path lies in (`.` for a bare name).
std::string socket_dir(const std::string& socket_path);

/// Checks `dir` as plan9port checks its namespace directory: lstat'ed, a directory and not a
/// symlink, owned by this uid, mode 0700. The error names the directory, what is wrong and the
/// fix, e.g. `/tmp/ns.me.:0: mode 0777, not 0700: chmod 700 /tmp/ns.me.:0`; a sticky directory
/// such as /tmp is refused as shared, with no chmod offered.
Status check_private_dir(const std::string& dir);
/// Creates `dir` 0700 when missing (its missing parents with the umask's mode), then checks it.
Status ensure_private_dir(const std::string& dir);
/// ensure_private_dir(dir), after ensure_private_dir(runtime_root()) when dir lies in the shared
/// /tmp fallback of the runtime root (another user could have made /tmp/ollie-<uid> first).
Status ensure_runtime_dir(const std::string& dir, const Env& env = process_env());

}  // namespace p9
