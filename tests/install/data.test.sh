#!/usr/bin/env bash
# The shipped data/: profiles use only §7.5 fields, name prompt files that exist and tools that
# the repository ships, run no `!` commands; the default system prompt stays small; every skill
# starts with its one-line description.
#   data.test.sh <source dir>
set -euo pipefail
src=${1:?usage: data.test.sh <source dir>}
cd "$src"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

fields='prompt systemPrompt userPrompts autoLoad backend model maxTokens maxCompletionTokens
  temperature topP minP topA frequencyPenalty presencePenalty repetitionPenalty topK reasoning
  reasoningEffort includeReasoning responseFormat stop verbosity'
shipped() { compgen -G "tools/*/$1.meta" >/dev/null || [ -f "data/tools/$1.meta" ]; }

for p in default observer conductor; do
  [ -f "data/agents/$p.json" ] || fail "profile $p is missing"
done
for f in data/agents/*.json; do
  jq -e 'type == "object"' "$f" >/dev/null 2>&1 || { fail "$f: not a JSON object"; continue; }
  for k in $(jq -r 'keys[]' "$f"); do
    [[ " $(echo $fields) " == *" $k "* ]] || fail "$f: field $k is not in spec §7.5"
  done
  while IFS= read -r e; do
    if [[ $e == '!'* ]]; then fail "$f: shipped profiles run no commands: $e"
    elif [ ! -f "data/prompts/$e" ]; then fail "$f: prompt entry not found: $e"; fi
  done < <(jq -r '(.prompt // []) + (.userPrompts // []) | .[]' "$f")
  jq -e '.autoLoad | type == "array" and all(type == "string")' "$f" >/dev/null || fail "$f: autoLoad is not an array of names"
  for t in $(jq -r '.autoLoad[]?' "$f"); do
    shipped "$t" || fail "$f: autoLoad names a tool the repository does not ship: $t"
  done
  r=$(jq -r '.reasoningEffort // "medium"' "$f")
  [[ $r == @(low|medium|high) ]] || fail "$f: reasoningEffort $r"
done
[ "$(jq -c .autoLoad data/agents/observer.json)" = '["file_read","file_grep","file_glob","reasoning_think"]' ] ||
  fail "observer loads more than file_read, file_grep, file_glob, reasoning_think"

size=$(wc -c <data/prompts/system.md)
[ "$size" -le 4096 ] || fail "data/prompts/system.md is $size bytes (at most 4096: it is in every request)"
grep -qF 'session/$OLLIE_SESSION_ID/agent/$OLLIE_AGENT_ID/plan' data/prompts/system.md || fail "system.md does not name the plan file"

for f in data/skills/*.md; do
  first=$(head -n1 "$f")
  [ -n "$first" ] && [[ $first != '#'* ]] && [ ${#first} -le 160 ] || fail "$f: the first line must be a one-line description: $first"
done

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }
echo "data: all checks passed"
