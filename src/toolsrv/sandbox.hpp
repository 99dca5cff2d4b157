#pragma once
/// From the policy to the concrete rules of one call: template expansion and path handling
/// (spec §7.3.2). Landlock itself is in landlock.hpp.

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toolsrv/fd.hpp"
#include "toolsrv/policy.hpp"

namespace toolsrv {

/// The template variables of §7.3.2 for one call.
struct TemplateVars {
  /// CWD, HOME, TMPDIR, XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_CACHE_HOME, XDG_STATE_HOME,
  /// XDG_RUNTIME_DIR, OLLIE_CFG_PATH, OLLIE_DATA_PATH, OLLIE_BIN_PATH.
  std::map<std::string, std::string> vars;
  /// The held descriptor of {CWD} (HeldCwd), -1 = none: the rule whose path is {CWD} is built
  /// from it, never by opening the path again.
  int cwd_fd = -1;

  /// The variables of a call in `cwd`: the fixed ones from the arguments, HOME and XDG_* from
  /// toolsrv's environment with their defaults.
  static TemplateVars for_call(const std::string& cwd, const std::string& tmpdir, const std::string& config_root,
                               const std::string& data_root, const std::string& bin_path);

  /// Replaces every `{NAME}`: a known variable, else the environment variable if set, else left
  /// as is (a path still holding `{` is then not absolute or does not exist, and is skipped).
  std::string expand(std::string_view text) const;
};

/// The four access classes of the filesystem section, and `sock`: a path of the `unix` list
/// (Landlock's RESOLVE_UNIX, granted only from the ABI that has it).
enum class Access { ro, rox, rw, rwx, sock };

/// One path to grant, expanded and existing.
struct PathRule {
  std::string path;
  Access access;
  /// The file the path resolved to when planned (stat, symlinks followed); 0/0 = not recorded.
  /// Landlock rules hold inodes, so two plans whose rules name the same files give the same
  /// ruleset (RulesetCache).
  dev_t dev = 0;
  ino_t ino = 0;
  /// A descriptor already open on the file (the held cwd), -1 = open `path` when building. Not
  /// part of equality: the ruleset depends on the file only.
  int fd = -1;

  bool operator==(const PathRule& o) const {
    return path == o.path && access == o.access && dev == o.dev && ino == o.ino;
  }
};

/// What a call's sandbox must enforce.
struct SandboxPlan {
  std::vector<PathRule> rules;
  /// The descriptors the file rules were planned on (PathRule::fd): the ruleset grants what was
  /// checked, whatever the path names by the time it is built.
  std::vector<UniqueFd> held;
  NetworkPolicy network;
  bool best_effort = false;
  /// The `unix` list expanded (absolute, cleaned, each parent directory resolved as the call
  /// begins; one with a link the sandbox can write on the way is skipped), {OLLIE_ADDR}'s socket
  /// first when there is one. The `sock` rules among `rules` are those of them that exist now.
  std::vector<std::string> unix_sockets;
  /// The policy names sockets beyond {OLLIE_ADDR}'s (the best_effort check of §7.3.2).
  bool unix_listed = false;
  /// Paths that were skipped (`<path>: does not exist` / `<template>: not absolute`), for the
  /// caller's log (once per path).
  std::vector<std::string> skipped;
  /// The file paths among them skipped because a link the sandbox can write is on the way (a
  /// tool directory that is such a link: its tools cannot run sandboxed).
  std::vector<std::string> redirectable;
};

/// Expands the policy for a call: rules for ro, rox, rw, rwx; rox for every tool directory; rox
/// on `exe` when advanced.add_exec or when `exe` is a link in a directory outside every writable
/// path (the file it names); with advanced.ldd, rox on the regular files the loader would
/// map for `exe` (linked_libraries), unless `exe` lies inside a writable path (nothing is read
/// from a file the model may have written), never on a directory and never on a file inside a
/// writable path (already granted there). A missing rw path under `data_root` is created (0700).
/// Every path is opened now, its rule built from that descriptor (SandboxPlan::held): a path with
/// no link on it in one walk of the kernel that follows none; one with links only where the
/// sandbox cannot write them, at what they lead to, walked again without following any; one with
/// a link in a directory the sandbox can write (whose target the model chose, or may swap in
/// between this check and the build) is skipped.
/// `writable` is writable_paths(policy, vars), resolved by the caller for this call.
/// `ollie_socket` is the path of {OLLIE_ADDR}'s socket ("" = none), always allowed.
SandboxPlan plan_sandbox(const Policy& policy, const TemplateVars& vars, const std::vector<std::string>& writable,
                         const std::vector<std::string>& tool_dirs, const std::string& data_root,
                         const std::string& exe, const std::string& ollie_socket = "");

/// The rw and rwx paths of the policy expanded for a call, cleaned and symlink-resolved: the
/// paths the model can write (tool directories inside them are not trusted for bypass or PATH).
std::vector<std::string> writable_paths(const Policy& policy, const TemplateVars& vars);

/// True when `path` (resolved) is or lies inside one of `writable`.
bool inside_writable(const std::string& path, const std::vector<std::string>& writable);

/// True when the model may have chosen what `path` names: as written or as it resolves it is or
/// lies inside one of `writable` (resolved), or a symbolic link on its way, followed link by
/// link, sits in one (the model can point it anywhere, also after this check). False means no
/// step of the path can be changed from inside the sandbox.
bool model_placed(const std::string& path, const std::vector<std::string>& writable);

/// `path` (absolute) followed link by link to where it leads now, a link-free path; none when a
/// link on the way sits in a directory of `writable` (resolved) or the links loop.
std::optional<std::string> resolve_unplaced(const std::string& path, const std::vector<std::string>& writable);

}  // namespace toolsrv
