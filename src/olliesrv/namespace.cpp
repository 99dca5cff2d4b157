#include "namespace.hpp"

#include "olliesrv.hpp"
#include "virtfs/tokenize.hpp"

namespace ollie {

namespace {

using D = virtfs::Dsl<Ctx>;
using Reply = asio::awaitable<p9::Result<std::string>>;

// Root ctl (spec §3.1).
Reply root_ctl(Ctx& c, std::string request) {
  auto cmd = virtfs::parse_command(request);
  if (!cmd) co_return cmd.error();
  if (cmd->verb == "kill") {
    if (!cmd->args.empty()) co_return p9::error("usage: kill");
    c.srv->shutdown();  // the reply still goes out: connections close after their last write
    co_return "ok\n";
  }
  co_return p9::error("unknown command: " + cmd->verb);
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
