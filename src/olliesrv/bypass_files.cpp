#include "bypass_files.hpp"

#include "hub.hpp"
#include "olliesrv.hpp"
#include "session.hpp"

namespace ollie {

namespace {

using D = virtfs::Dsl<Ctx>;
using Text = p9::Result<std::string>;

Text read_pending(Ctx& c) {
  return c.srv->hub().bypass.pending(*c.session);
}

asio::awaitable<p9::Status> write_pending(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) co_return st;
  co_return co_await c.srv->hub().bypass.answer(c.session, std::move(text), c.who.uname);
}

Text read_session_policy(Ctx& c) {
  std::lock_guard lock(c.session->mu);
  return c.session->bypass;
}

p9::Status write_session_policy(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) return st;
  return Bypass::set_session_policy(*c.session, std::move(text));
}

}  // namespace

virtfs::Node<Ctx> bypass_dir() {
  using namespace virtfs;
  return D::Dir(
      "bypass", Mode{0700}, Doc{"sandbox escapes: the global policy and the requests waiting for the hostowner"},
      D::Leaf("policy", Mode{0600}, Doc{"the global bypass policy; write to replace it (validated, persisted)"},
              Read([](Ctx& c) { return Text(c.srv->hub().bypass.policy()); }),
              Write([](Ctx& c, std::string text) { return c.srv->hub().bypass.set_policy(std::move(text)); })),
      D::Dir("pending", Mode{0700}, Doc{"the waiting bypass requests, one file per session"},
             D::TemplateLeaf("{session}", Mode{0600}, Doc{"reqid agent tool summary lines; write <reqid> allow [always] | deny"},
                         List(session_names), Lookup(session_lookup), Read(read_pending), Write(write_pending))));
}

virtfs::Node<Ctx> session_bypass_file() {
  using namespace virtfs;
  return D::Leaf("bypass", Mode{0600}, Doc{"the session's bypass policy, before the global one; write to replace it"},
                 Read(read_session_policy), Write(saved(write_session_policy)),
                 Mtime(changed_at(&Session::bypass_changed)));
}

}  // namespace ollie
