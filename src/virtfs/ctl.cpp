#include "virtfs/ctl.hpp"

#include "lib9p/errors.hpp"
#include "virtfs/tokenize.hpp"

namespace virtfs {

p9::Error Command::usage() const {
  return p9::error("usage: " + verb + (synopsis.empty() ? "" : " ") + std::string(synopsis));
}

namespace detail {

std::pair<std::string_view, std::string_view> split_verb(std::string_view request) {
  while (!request.empty() && blank(request.front())) request.remove_prefix(1);
  std::size_t end = 0;
  while (end < request.size() && !blank(request[end])) end++;
  return {request.substr(0, end), request.substr(end)};
}

p9::Error unknown(std::string_view verb, Caller who) {
  if (who.self) return p9::error(p9::err::permission_denied);
  return p9::error("unknown command: " + std::string(verb));
}

p9::Result<Command> check(const Rules& r, std::string_view rest, bool one_line, Caller who) {
  Command c{std::string(r.name), {}, r.synopsis};
  if (r.free_text) {
    if (!rest.empty()) rest.remove_prefix(1);  // the one blank after the verb
    if (!rest.empty()) c.args.emplace_back(rest);
  } else {
    if (one_line && rest.find('\n') != std::string_view::npos) return p9::error("one command per request");
    auto toks = tokenize(rest);
    if (!toks) return toks.error();
    c.args = std::move(*toks);
  }
  const bool given = !c.args.empty();
  if (who.self && (r.self == Self::no || (r.self == Self::query && given))) return p9::error(p9::err::permission_denied);
  if (c.args.size() < r.min_args || c.args.size() > r.max_args) return c.usage();
  if (who.running && (r.idle == Idle::yes || (r.idle == Idle::set && given)))
    return p9::error("cannot " + c.verb + " while agent is running");
  return c;
}

}  // namespace detail

}  // namespace virtfs
