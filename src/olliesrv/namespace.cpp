#include "namespace.hpp"

#include "olliesrv.hpp"
#include "virtfs/ctl.hpp"

namespace ollie {

namespace {

using D = virtfs::Dsl<Ctx>;
using Reply = asio::awaitable<p9::Result<std::string>>;
using Text = p9::Result<std::string>;

// ---- root ctl (spec §3.1) -------------------------------------------------------------------

Text stop_server(Ctx& c, const virtfs::Command&) {
  c.srv->shutdown();  // the reply still goes out: connections close after their last write
  return std::string("ok\n");
}

constexpr virtfs::Verb<Text (*)(Ctx&, const virtfs::Command&)> root_verbs[] = {
    {.name = "kill", .run = stop_server},
};

Reply root_ctl(Ctx& c, std::string request) {
  auto m = virtfs::match(root_verbs, request);
  if (!m) co_return m.error();
  co_return m->verb->run(c, m->command);
}

}  // namespace

virtfs::Node<Ctx> declare() {
  using namespace virtfs;
  return D::Dir("/", Mode{0555}, Doc{"the olliesrv namespace"},
      D::Leaf("help", Mode{0444}, Doc{"this list: path, kind, mode and doc of every file"},
              Read([](Ctx& c) { return p9::Result<std::string>(c.srv->help()); })),
      D::Leaf("ctl", Mode{0600}, Doc{"server control; verbs: kill"}, Rdwr(root_ctl)),
      D::Leaf("event", Mode{0666}, Doc{"events from open on, one per line; write topic patterns first to filter"},
              StreamRdwr([](Ctx& c) { return p9::Result<std::shared_ptr<Cursor>>(c.srv->bus().subscribe()); })));
}

}  // namespace ollie
