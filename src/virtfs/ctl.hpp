#pragma once
/// Control files as a table (spec §3, §6.3, §6.5.4), like lib9p's parsecmd/lookupcmd: each row
/// is a verb with its synopsis, argument counts, who besides the hostowner may use it, whether
/// it needs an idle agent, and its handler. match() tokenizes a request (spec §1.3), finds the
/// row and checks it, so that every ctl file answers the same errors from one place:
/// `unknown command: <verb>`, `usage: <verb> <synopsis>`, `permission denied`,
/// `cannot <verb> while agent is running`, `one command per request`, `unterminated quote`.
///
///   using Fn = p9::Status (*)(Session&, const virtfs::Command&);
///   constexpr virtfs::Verb<Fn> verbs[] = {
///       {.name = "forget", .synopsis = "<agent>", .min_args = 1, .max_args = 1, .run = forget}};
///   auto m = virtfs::match_line(verbs, line);
///   if (!m) return m.error();
///   return m->verb->run(session, m->command);

#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lib9p/result.hpp"
#include "virtfs/tokenize.hpp"

namespace virtfs {

/// Spec §3.3's Self column: may the object's own principal (an agent's tools) use the verb?
enum class Self { no, query, yes };  ///< query: only without arguments (show, not set)
/// Spec §3.3's Idle only column: is the verb refused while the agent runs a turn?
enum class Idle { no, yes, set };    ///< set: only when given arguments

inline constexpr std::size_t MANY = std::numeric_limits<std::size_t>::max();  ///< no max_args

/// Who sends a request and the state of its object. The file's mode bits have already let only
/// the hostowner and the object itself open it (spec §1.6).
struct Caller {
  bool self = false;     ///< the object's own principal, not the hostowner
  bool running = false;  ///< the agent is in a turn
};

/// A matched request: its verb and arguments (for a free-text verb, the raw rest as its one
/// argument, or none when it is empty).
struct Command {
  std::string verb;
  std::vector<std::string> args;
  std::string_view synopsis;
  /// `usage: <verb> <synopsis>`, for a handler refusing arguments the counts let through.
  p9::Error usage() const;
};

template <class Fn>
struct Verb {
  std::string_view name;
  std::string_view synopsis;  ///< what follows the verb in its usage; empty when it takes nothing
  std::size_t min_args = 0;
  std::size_t max_args = 0;
  Self self = Self::no;
  Idle idle = Idle::no;
  bool free_text = false;     ///< the argument is the rest of the request after the verb and one blank
  Fn run;
};

template <class Fn>
struct Matched {
  const Verb<Fn>* verb;
  Command command;
};

namespace detail {

struct Rules {
  std::string_view name, synopsis;
  std::size_t min_args, max_args;
  Self self;
  Idle idle;
  bool free_text;
};
/// The verb of a request and what follows it.
std::pair<std::string_view, std::string_view> split_verb(std::string_view request);
/// The arguments of `rest` by the row's rules, checked against them and the caller.
p9::Result<Command> check(const Rules& r, std::string_view rest, bool one_line, Caller who);
/// `unknown command: <verb>`; to self `permission denied` (§1.6: anything but its verbs).
p9::Error unknown(std::string_view verb, Caller who);

template <class Fn>
p9::Result<Matched<Fn>> match(std::span<const Verb<Fn>> table, std::string_view request, bool one_line, Caller who) {
  auto [verb, rest] = split_verb(request);
  for (const auto& v : table) {
    if (v.name != verb) continue;
    auto c = check({v.name, v.synopsis, v.min_args, v.max_args, v.self, v.idle, v.free_text}, rest, one_line, who);
    if (!c) return c.error();
    return Matched<Fn>{&v, std::move(*c)};
  }
  return unknown(verb, who);
}

}  // namespace detail

/// One request of a Rdwr ctl file (spec §3): blanks around it trimmed; a second line is refused
/// unless the verb is free-text.
template <class Fn, std::size_t N>
p9::Result<Matched<Fn>> match(const Verb<Fn> (&table)[N], std::string_view request, Caller who = {}) {
  return detail::match(std::span<const Verb<Fn>>(table), trim(request), true, who);
}

/// One line of a Write ctl file (spec §6.3, §6.5.4): a free-text verb gets the rest of the line
/// verbatim, trailing blanks kept.
template <class Fn, std::size_t N>
p9::Result<Matched<Fn>> match_line(const Verb<Fn> (&table)[N], std::string_view line, Caller who = {}) {
  return detail::match(std::span<const Verb<Fn>>(table), line, false, who);
}

/// A Write ctl file's text: `each` for every line that is not blank, in order; the first error
/// stops and is returned.
template <class F>
p9::Status each_line(std::string_view text, F&& each) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (trim(line).empty()) continue;
    if (p9::Status st = each(line); !st) return st;
  }
  return {};
}

}  // namespace virtfs
