#pragma once
/// The bypass policy text (spec §6.9.3) and the text of a request (§6.9.2): parse and validate a
/// policy, match its rules, decide a request, and the summary of a call as rules and the
/// hostowner see it. Pure: no I/O, no state.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib9p/result.hpp"

namespace ollie::bypass {

/// Longest policy line and longest policy text accepted (a bad line otherwise).
inline constexpr std::size_t max_line = 1u << 20;
inline constexpr std::size_t max_text = 8u << 20;

enum class Verdict { ask, allow, deny };

struct Rule {
  bool allow = false;
  std::string tool;  ///< a tool name, or `*`
  std::string glob;  ///< as written (escapes kept)
  int line = 0;      ///< 1-based line of the text
};

struct Policy {
  std::optional<Verdict> mode;
  int mode_line = 0;
  std::vector<Rule> rules;
  std::vector<std::pair<std::string, std::string>> sandbox;  ///< (sha256, absolute dir), global only
};

enum class Scope { global, session };

/// Parses a whole policy text; the first bad line is `policy line <n>: <reason>`.
p9::Result<Policy> parse(std::string_view text, Scope scope);

/// The summary of a request's arguments (§6.9.2): the `cmd` string when the arguments are exactly
/// `{"cmd": <string>}`, else the compact JSON of all of them, keys sorted.
struct Summary {
  std::string text;
  bool command = false;  ///< text is a command string: `*` and `?` never match ;&|<>$`(){}
};
Summary summarize(const nlohmann::json& args);

/// Whether `glob` (§6.9.3: `*`, `?`, `\` escapes) matches the whole of `s`. Neither `*` nor `?`
/// matches a newline, nor, for a command, any of ;&|<>$`(){}.
bool glob_match(std::string_view glob, const Summary& s);

/// What decided a request, for blocks and the audit log.
struct Decision {
  Verdict verdict = Verdict::ask;
  std::string by;  ///< `session line 3: allow shell git status`, `global mode`, `default` …
};

/// Session rules top to bottom, then global rules; the first matching rule decides; else the
/// session's mode, the global mode, `ask`. A summary with a newline matches no allow rule.
Decision decide(const Policy& session, const Policy& global, const std::string& tool, const Summary& s);

/// The rule `allow always` adds (§6.9.2): `allow <tool> <summary, glob-escaped>`, which matches
/// exactly that summary. The error says why no rule can: `multi-line command` (no allow rule
/// matches a newline), `empty command`, `command too long for a rule`.
p9::Result<std::string> allow_rule(const std::string& tool, const Summary& s);

/// The summary as `bypass/pending/{session}` shows it (§2.3): `\` and every control character
/// written `\\`, `\t`, `\r`, `\n`, `\xNN`, so a request is one line and a terminal shows exactly
/// what would run. Also written `\xNN` byte by byte: C1 controls, Unicode bidirectional
/// overrides and isolates, and bytes that are not UTF-8.
std::string escape(std::string_view s);
/// A value named in an error: escaped, so the error stays one readable line; a value longer than
/// 64 bytes is cut there (at a character's start) and ends in `…`, so the cut is not taken for
/// the value.
std::string shown(std::string_view s);

/// JSON text (a call's arguments) as `chat` and `log` show it (§2.8.7): a code point a terminal
/// would obey or hide (C0 and C1 controls, DEL, bidirectional marks, overrides and isolates, line
/// and paragraph separators) written `\uXXXX`, which JSON reads as the same text; a byte that is
/// not UTF-8 as `\ufffd`. What a person reads is what the tool gets.
std::string visible_json(std::string_view s);

}  // namespace ollie::bypass
