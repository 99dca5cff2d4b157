#!/usr/bin/env bash
# ./dev.sh install --no-build against a fake build and a temporary copy of the repository's
# data/, with HOME in a temporary directory: modes, the manifest, edits kept beside a .new,
# unedited files updated, deletions kept, files no longer shipped removed.
#   install.test.sh <source dir>
set -euo pipefail
src=${1:?usage: install.test.sh <source dir>}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
check() { local what=$1; shift; "$@" || fail "$what"; }
mode() { stat -c %a "$1"; }
has() { grep -qF -- "$2" <<<"$1" || fail "output lacks '$2': $1"; }

# A repository copy (the installer works from dev.sh's directory) and a fake build.
repo=$tmp/repo build=$tmp/build
mkdir -p "$repo" "$build/bin" "$build/tools/CMakeFiles"
cp "$src/dev.sh" "$repo/"
cp -r "$src/data" "$repo/"
mkdir -p "$repo/data/scripts" "$repo/data/tools"
echo '{"description": "Not built."}' >"$repo/data/tools/unbuilt.meta"
printf '#!/bin/sh\necho try\n' >"$repo/data/scripts/ollie-try"
chmod 755 "$repo/data/scripts/ollie-try"
mkdir -p "$build/bin/static"
for p in olliesrv ollie-9p ollie-acp toolsrv static/ollie-9p static/toolsrv; do printf '#!/bin/sh\necho %s\n' "$p" >"$build/bin/$p"; done
chmod 755 "$build"/bin/* "$build"/bin/static/*
for t in hello file_read; do printf '#!/bin/sh\necho %s\n' "$t" >"$build/tools/$t"; done
chmod 755 "$build/tools/hello" "$build/tools/file_read"
echo '{"description": "Say hello."}' >"$build/tools/hello.meta"
echo '# cmake' >"$build/tools/cmake_install.cmake"

export HOME=$tmp/home
unset XDG_CONFIG_HOME OLLIE_BIN
cfg=$HOME/.config/ollie bin=$HOME/.local/bin
run() { "$repo/dev.sh" install --no-build "$build" 2>&1; }

# 1. A fresh install: everything, with the right modes.
out=$(run) || fail "fresh install failed: $out"
has "$out" "config root $cfg"
has "$out" "programs in $bin"
has "$out" "0 updated"
while IFS= read -r -d '' f; do
  rel=${f#"$repo/data/"}
  check "installed $rel" cmp -s "$f" "$cfg/$rel"
done < <(find "$repo/data" -type f ! -path '*/data/tools/*' ! -path '*/data/scripts/*' ! -path '*/data/services/*' -print0)
for d in "$cfg" "$cfg/agents" "$cfg/prompts" "$cfg/skills" "$cfg/tools"; do
  check "$d is 0700 (is $(mode "$d"))" [ "$(mode "$d")" = 700 ]
done
check "agents/default.json is 0644" [ "$(mode "$cfg/agents/default.json")" = 644 ]
check "sandbox.yaml installed" [ -f "$cfg/sandbox.yaml" ]
check "tool executable is 0755" [ "$(mode "$cfg/tools/hello")" = 755 ]
check "tool .meta is 0644" [ "$(mode "$cfg/tools/hello.meta")" = 644 ]
check "no CMake files among the tools" [ ! -e "$cfg/tools/cmake_install.cmake" ] && [ ! -e "$cfg/tools/CMakeFiles" ]
check "tools come from the build, not data/tools" [ ! -e "$cfg/tools/unbuilt.meta" ]
for p in olliesrv ollie-9p ollie-acp toolsrv ollie-try; do
  check "$bin/$p is 0755" [ "$(mode "$bin/$p" 2>/dev/null)" = 755 ]
done
check "scripts are not in the config root" [ ! -e "$cfg/scripts" ]
unit=$HOME/.config/systemd/user/olliesrv.service
check "the systemd user unit is installed" cmp -s "$repo/data/services/olliesrv.service" "$unit"
check "the unit is 0644" [ "$(mode "$unit")" = 644 ]
check "services are not in the config root" [ ! -e "$cfg/services" ]
has "$out" "systemctl --user daemon-reload && systemctl --user enable --now olliesrv"
# systemd itself reads the unit (no user manager needed): keys, and ExecStart = the installed olliesrv
if command -v systemd-analyze >/dev/null; then
  mkdir -m 700 "$tmp/run"
  v=$(XDG_RUNTIME_DIR=$tmp/run systemd-analyze --man=no verify --user "$unit" 2>&1) || fail "systemd-analyze verify: $v"
  [ -z "$v" ] || fail "systemd-analyze verify warns: $v"
fi
check "manifest is 0600" [ "$(mode "$cfg/.installed")" = 600 ]
check "manifest lists $cfg/agents/default.json" grep -q "^[0-9a-f]\{64\}  $cfg/agents/default.json\$" "$cfg/.installed"
check "manifest lists $bin/olliesrv" grep -qF "  $bin/olliesrv" "$cfg/.installed"
n=$(wc -l <"$cfg/.installed")

# 2. Again, nothing changed: nothing written.
out=$(run) || fail "second install failed: $out"
has "$out" "0 added, 0 updated, $n unchanged"
check "no .new files after an unchanged install" [ -z "$(find "$cfg" "$bin" -name '*.new')" ]

# 3. The user edits one file; the sources of it and of an unedited file change.
echo '{"prompt": ["mine.md"]}' >"$cfg/agents/default.json"
echo '{"prompt": ["agent-default.md"], "autoLoad": ["shell"]}' >"$repo/data/agents/default.json"
echo 'A new system prompt.' >"$repo/data/prompts/system.md"
printf '#!/bin/sh\necho hello again\n' >"$build/tools/hello"
out=$(run) || fail "install after edits failed: $out"
has "$out" "kept your $cfg/agents/default.json; the new version is $cfg/agents/default.json.new"
has "$out" "2 updated"
check "the user's edit is kept" grep -q mine.md "$cfg/agents/default.json"
check "the new version is beside it" cmp -s "$repo/data/agents/default.json" "$cfg/agents/default.json.new"
check "an unedited file is updated" cmp -s "$repo/data/prompts/system.md" "$cfg/prompts/system.md"
check "an unedited tool is updated" cmp -s "$build/tools/hello" "$cfg/tools/hello"
check "an updated tool stays 0755" [ "$(mode "$cfg/tools/hello")" = 755 ]
# Still edited at the next install: still kept, and said again.
out=$(run)
has "$out" "kept your $cfg/agents/default.json"
check "the edit survives a second install" grep -q mine.md "$cfg/agents/default.json"
# The user takes the new version: from then on it is updated again.
mv "$cfg/agents/default.json.new" "$cfg/agents/default.json"
echo '{"prompt": ["agent-default.md"]}' >"$repo/data/agents/default.json"
out=$(run)
check "an adopted .new is updated later" cmp -s "$repo/data/agents/default.json" "$cfg/agents/default.json"

# 4. A file the user deleted stays deleted.
rm "$cfg/skills/review-a-change.md"
echo 'changed' >>"$repo/data/skills/review-a-change.md"
out=$(run)
has "$out" "kept deleted: $cfg/skills/review-a-change.md"
check "a deleted file stays deleted" [ ! -e "$cfg/skills/review-a-change.md" ]
check "and gets no .new" [ ! -e "$cfg/skills/review-a-change.md.new" ]

# 5. No longer shipped: removed when unedited, kept when edited.
echo 'my notes' >>"$cfg/skills/debug-a-failing-test.md"
rm "$repo/data/skills/write-a-commit-message.md" "$repo/data/skills/debug-a-failing-test.md"
out=$(run)
has "$out" "removed (no longer shipped): $cfg/skills/write-a-commit-message.md"
has "$out" "kept your $cfg/skills/debug-a-failing-test.md (no longer shipped)"
check "an unedited file no longer shipped is removed" [ ! -e "$cfg/skills/write-a-commit-message.md" ]
check "an edited one is kept" grep -q 'my notes' "$cfg/skills/debug-a-failing-test.md"
check "both leave the manifest" [ -z "$(grep -e write-a-commit-message -e debug-a-failing-test "$cfg/.installed")" ]
echo mine >"$cfg/agents/mine.json"
run >/dev/null
check "a file of the user's own is untouched" grep -q mine "$cfg/agents/mine.json"

# 5b. A hand-edited manifest: a blank line or one without a path is skipped, not fatal.
sed -i '1i\\' "$cfg/.installed"
echo garbage >>"$cfg/.installed"
out=$(run) || fail "install with a blank manifest line failed: $out"
check "the other lines still hold" [ ! -e "$cfg/skills/review-a-change.md" ]

# 5c. A shipped file whose mode alone changed gets the new mode.
chmod 644 "$build/tools/hello"
run >/dev/null
check "a tool shipped 0644 is installed 0644" [ "$(mode "$cfg/tools/hello")" = 644 ]
chmod 755 "$build/tools/hello"
out=$(run)
check "shipped 0755 again, it is 0755 again" [ "$(mode "$cfg/tools/hello")" = 755 ]
has "$out" "1 updated"

# 5d. Another OLLIE_BIN: the programs of the first bin root are not this install's to remove.
out=$(OLLIE_BIN=$tmp/bin2 run)
check "programs in the new bin root" [ -x "$tmp/bin2/olliesrv" ]
check "the old bin root keeps its programs" [ -x "$bin/olliesrv" ] && [ -x "$bin/static/toolsrv" ]
check "nothing said removed" [ -z "$(grep 'removed' <<<"$out")" ]
run >/dev/null

# 5d'. The same bin root spelled with a trailing slash, then without: the same files, none removed
# (the manifest's `//` paths read as others, shipped no longer, and removed every program).
OLLIE_BIN=$bin/ run >/dev/null
out=$(run)
check "nothing said removed after a trailing slash" [ -z "$(grep 'removed' <<<"$out")" ]
check "the programs are still there" [ -x "$bin/olliesrv" ] && [ -x "$bin/static/toolsrv" ]
run >/dev/null
check "and stay there" [ -x "$bin/olliesrv" ]

# 5e. A relative XDG_CONFIG_HOME is ignored, as olliesrv ignores it (doc/data.md).
out=$(cd "$tmp" && XDG_CONFIG_HOME=relcfg run)
has "$out" "config root $cfg:"
check "nothing installed under the working directory" [ ! -e "$tmp/relcfg" ]

# 6. XDG_CONFIG_HOME and OLLIE_BIN are honoured; a file already there that differs is kept.
mkdir -p "$tmp/xdg/ollie"
echo 'general: {best_effort: true}' >"$tmp/xdg/ollie/sandbox.yaml"
out=$(XDG_CONFIG_HOME=$tmp/xdg OLLIE_BIN=$tmp/obin run) || fail "install with XDG_CONFIG_HOME failed: $out"
has "$out" "programs in $tmp/obin"
check "programs in OLLIE_BIN" [ -x "$tmp/obin/olliesrv" ]
check "config in XDG_CONFIG_HOME" [ -f "$tmp/xdg/ollie/agents/observer.json" ]
check "a differing file found there is kept" grep -q 'best_effort: true' "$tmp/xdg/ollie/sandbox.yaml"
check "with the shipped one beside it" cmp -s "$repo/data/sandbox.yaml" "$tmp/xdg/ollie/sandbox.yaml.new"

# 7. A build without its programs installs nothing.
rm "$build/bin/toolsrv"
if out=$(XDG_CONFIG_HOME=$tmp/none run); then fail "install without toolsrv succeeded"; fi
has "$out" "$build/bin/toolsrv is missing: build it first"
check "nothing installed from an incomplete build" [ ! -e "$tmp/none" ]
# Nor one without its tools or static programs, which would read as all of them no longer shipped.
printf '#!/bin/sh\n' >"$build/bin/toolsrv"; chmod 755 "$build/bin/toolsrv"
for gone in tools/file_read bin/static/toolsrv; do
  mv "$build/$gone" "$tmp/aside"
  if out=$(run); then fail "install without $gone succeeded"; fi
  has "$out" "$build/$gone is missing: build it first"
  mv "$tmp/aside" "$build/$gone"
done
check "the installed tools are still there" [ -x "$cfg/tools/hello" ] && [ -x "$bin/static/toolsrv" ]

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }
echo "install: all checks passed"
