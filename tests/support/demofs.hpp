#pragma once
// A small namespace with every file kind, served by the real virtfs adapter, for the lib9p and
// virtfs tests.

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <map>
#include <mutex>

#include "virtfs/serve.hpp"

namespace testing_support {

/// An object of item/: an immutable id, a name that can change, and a versioned value.
struct DemoItem {
  std::uint64_t id;
  std::string name;
  std::string value;
  std::uint32_t version = 0;
};

struct DemoState {
  std::mutex mu;
  std::string value = "idle";   // the BlockOnce value
  std::shared_ptr<virtfs::Signal> value_changed = std::make_shared<virtfs::Signal>();
  std::string counter_text = "0";  // content of `counter`, changed by tests
  std::vector<std::string> writes;  // every payload the Write handler received
  std::vector<std::string> requests;  // every request the Rdwr handler received
  std::shared_ptr<virtfs::ByteLog> log = std::make_shared<virtfs::ByteLog>();
  std::map<std::string, std::shared_ptr<DemoItem>> items;  // by name
  std::uint64_t next_item = 1;
  std::atomic<int> cursors_alive{0};
  std::shared_ptr<virtfs::Signal> never = std::make_shared<virtfs::Signal>();

  DemoState() {
    add_item("a", "alpha");
    add_item("b", "beta");
  }
  void set_value(std::string v) {
    {
      std::lock_guard lk(mu);
      value = std::move(v);
    }
    value_changed->notify();
  }
  /// item/<name>, also reachable as item/id<N>.
  std::shared_ptr<DemoItem> add_item(const std::string& name, std::string value) {
    std::lock_guard lk(mu);
    auto it = std::make_shared<DemoItem>(DemoItem{next_item++, name, std::move(value), 0});
    items[name] = it;
    return it;
  }
  void rename_item(const std::string& from, const std::string& to) {
    std::lock_guard lk(mu);
    auto it = items.extract(from);
    it.key() = to;
    it.mapped()->name = to;
    items.insert(std::move(it));
  }
  void kill_item(const std::string& name) {
    std::lock_guard lk(mu);
    items.erase(name);
  }
  void set_item(const std::string& name, std::string value) {
    std::lock_guard lk(mu);
    items.at(name)->value = std::move(value);
    items.at(name)->version++;
  }
};

struct DemoCtx {
  virtfs::Principal who;
  std::shared_ptr<DemoState> st;
  std::shared_ptr<DemoItem> item;  // bound inside item/{item}
};

// A cursor that counts live instances (so tests can see fids freed) and filters lines by prefix.
class DemoCursor : public virtfs::Cursor {
 public:
  DemoCursor(std::shared_ptr<DemoState> st) : st_(std::move(st)), inner_(st_->log->cursor(0)) { st_->cursors_alive++; }
  ~DemoCursor() override { st_->cursors_alive--; }
  virtfs::Chunk read(std::size_t max) override {
    for (;;) {
      auto c = inner_->read(max);
      if (prefix_.empty() || c.data.empty()) return c;
      std::string kept;
      std::size_t i = 0;
      while (i < c.data.size()) {
        auto j = c.data.find('\n', i);
        std::string line = c.data.substr(i, j == std::string::npos ? std::string::npos : j - i + 1);
        if (line.starts_with(prefix_)) kept += line;
        i += line.size();
      }
      if (!kept.empty() || c.eof) return {kept, c.eof};
    }
  }
  std::shared_ptr<virtfs::Signal> signal() override { return inner_->signal(); }
  p9::Status request(std::string_view req) override {
    if (req.find('*') != std::string_view::npos) return p9::error("bad pattern: " + std::string(req));
    prefix_ = req;
    while (!prefix_.empty() && prefix_.back() == '\n') prefix_.pop_back();
    return {};
  }

 private:
  std::shared_ptr<DemoState> st_;
  std::shared_ptr<virtfs::Cursor> inner_;
  std::string prefix_;
};

inline virtfs::Node<DemoCtx> demo_decl() {
  using D = virtfs::Dsl<DemoCtx>;
  using namespace virtfs;
  return D::Dir("/", Mode{0555},
      D::Leaf("hello", Mode{0444}, Doc{"a greeting"}, Read([](DemoCtx&) { return p9::Result<std::string>("hello, world\n"); })),
      D::Leaf("counter", Mode{0444}, Doc{"changes when tests say"}, Read([](DemoCtx& c) {
        std::lock_guard lk(c.st->mu);
        return p9::Result<std::string>(c.st->counter_text);
      })),
      D::Leaf("sink", Mode{0222}, Doc{"records writes"}, Write([](DemoCtx& c, std::string data) -> p9::Status {
        if (data == "fail\n") return p9::error("sink refused: fail");
        std::lock_guard lk(c.st->mu);
        c.st->writes.push_back(std::move(data));
        return {};
      })),
      D::Leaf("note", Mode{0644}, Doc{"read and write"},
              Read([](DemoCtx& c) {
                std::lock_guard lk(c.st->mu);
                return p9::Result<std::string>(c.st->writes.empty() ? "" : c.st->writes.back());
              }),
              Write([](DemoCtx& c, std::string data) -> p9::Status {
                std::lock_guard lk(c.st->mu);
                c.st->writes.push_back(std::move(data));
                return {};
              })),
      D::Leaf("ctl", Mode{0600}, Doc{"upper-cases requests"},
              Rdwr([](DemoCtx& c, std::string req) -> asio::awaitable<p9::Result<std::string>> {
                {
                  std::lock_guard lk(c.st->mu);
                  c.st->requests.push_back(req);
                }
                if (req.starts_with("bad")) co_return p9::error("unknown command: bad");
                for (auto& ch : req) ch = std::toupper(static_cast<unsigned char>(ch));
                co_return "reply:" + req;
              })),
      D::Leaf("deflt", Mode{0666}, Doc{"Rdwr with a default request"}, DefaultRequest{"status"},
              Rdwr([](DemoCtx&, std::string req) -> asio::awaitable<p9::Result<std::string>> { co_return "got " + req + "\n"; })),
      D::Leaf("slow", Mode{0666}, Doc{"Rdwr that waits until flushed"},
              Rdwr([](DemoCtx& c, std::string) -> asio::awaitable<p9::Result<std::string>> {
                co_await c.st->never->wait(c.st->never->version());
                co_return "woke\n";
              })),
      D::Leaf("state", Mode{0444}, Doc{"BlockOnce value"},
              BlockOnce(
                  [](DemoCtx& c) {
                    std::lock_guard lk(c.st->mu);
                    return p9::Result<std::string>(c.st->value);
                  },
                  [](DemoCtx& c) { return c.st->value_changed; }),
              Read([](DemoCtx& c) {
                std::lock_guard lk(c.st->mu);
                return p9::Result<std::string>("heartbeat:" + c.st->value);
              })),
      D::Leaf("feed", Mode{0600}, Doc{"Write+BlockOnce without Read"},
              BlockOnce(
                  [](DemoCtx& c) {
                    std::lock_guard lk(c.st->mu);
                    return p9::Result<std::string>(c.st->value);
                  },
                  [](DemoCtx& c) { return c.st->value_changed; }),
              Write([](DemoCtx& c, std::string v) -> p9::Status {
                c.st->set_value(std::move(v));
                return {};
              })),
      D::Leaf("log", Mode{0444}, Doc{"a Stream"},
              Stream([](DemoCtx& c) { return p9::Result<std::shared_ptr<Cursor>>(c.st->log->cursor(0)); })),
      D::Leaf("event", Mode{0666}, Doc{"a Streaming Rdwr"},
              StreamRdwr([](DemoCtx& c) { return p9::Result<std::shared_ptr<Cursor>>(std::make_shared<DemoCursor>(c.st)); })),
      D::Leaf("secret", Mode{0400}, Doc{"owner only"}, Read([](DemoCtx&) { return p9::Result<std::string>("s3cr3t\n"); })),
      D::Leaf("team", Mode{0440}, Doc{"group agent may read"}, Read([](DemoCtx&) { return p9::Result<std::string>("team\n"); })),
      D::Dir("private", Mode{0700}, Doc{"owner only directory"},
             D::Leaf("x", Mode{0444}, Read([](DemoCtx&) { return p9::Result<std::string>("x\n"); }))),
      D::Dir("item", Mode{0555}, Doc{"a template directory"},
             D::Leaf("idx", Mode{0444}, Read([](DemoCtx& c) {
               std::lock_guard lk(c.st->mu);
               std::string out;
               for (auto& [name, item] : c.st->items) out += name + "\n";
               return p9::Result<std::string>(out);
             })),
             D::Template("{item}", Mode{0555},
                         List([](DemoCtx& c) {
                           std::lock_guard lk(c.st->mu);
                           std::vector<std::string> names;
                           for (auto& [name, item] : c.st->items) names.push_back(name);
                           return names;
                         }),
                         Lookup([](const DemoCtx& c, const std::string& name) -> std::optional<Instance<DemoCtx>> {
                           std::lock_guard lk(c.st->mu);
                           std::shared_ptr<DemoItem> found;
                           if (auto it = c.st->items.find(name); it != c.st->items.end()) found = it->second;
                           for (auto& [n, item] : c.st->items)  // then by id, as sessions and agents are
                             if (!found && name == "id" + std::to_string(item->id)) found = item;
                           if (!found) return std::nullopt;
                           DemoCtx n = c;
                           n.item = found;
                           return Instance<DemoCtx>{std::move(n), found};
                         }),
                         D::Leaf("value", Mode{0444}, Owner([](const DemoCtx& c) {
                                   std::lock_guard lk(c.st->mu);
                                   return "owner-" + c.item->name;
                                 }),
                                 Vers([](const DemoCtx& c) {
                                   std::lock_guard lk(c.st->mu);
                                   return c.item->version;
                                 }),
                                 Length([](const DemoCtx& c) {
                                   std::lock_guard lk(c.st->mu);
                                   return std::uint64_t(c.item->value.size() + 1);
                                 }),
                                 Read([](DemoCtx& c) {
                                   std::lock_guard lk(c.st->mu);
                                   return p9::Result<std::string>(c.item->value + "\n");
                                 })))));
}

/// The demo tree served with: the hostowner "glenda" (no auth), agents "agent1"/"agent2"
/// (group agent) and "sub1" (group subagent) authenticating with the secret "key-<name>".
inline std::shared_ptr<virtfs::Adapter<DemoCtx>> demo_fs(std::shared_ptr<DemoState> st) {
  auto tree = virtfs::build(demo_decl());
  if (!tree) throw std::runtime_error(tree.ename());
  virtfs::Access<DemoCtx> access;
  access.hostowner = "glenda";
  access.auth = [](const std::string& uname, const std::string&, const p9::Peer&) -> p9::Status {
    if (uname == "glenda") return p9::error(p9::err::auth_not_required);
    if (uname == "agent1" || uname == "agent2" || uname == "sub1") return {};
    return p9::error("unknown user: " + uname);
  };
  access.attach = [](const virtfs::AttachRequest& r) -> p9::Result<virtfs::Principal> {
    if (r.uname == "glenda") return virtfs::Principal{"glenda", "", true};
    if (r.uname != "agent1" && r.uname != "agent2" && r.uname != "sub1") return p9::error("unknown user: " + r.uname);
    if (!r.has_afid) return p9::error(p9::err::auth_required);
    if (r.afid_uname != r.uname || r.secret != "key-" + r.uname) return p9::error(p9::err::auth_failed);
    return virtfs::Principal{r.uname, r.uname == "sub1" ? "subagent" : "agent", false};
  };
  access.root = [st](const virtfs::Principal& who) { return DemoCtx{who, st, nullptr}; };
  return std::make_shared<virtfs::Adapter<DemoCtx>>(std::move(*tree), std::move(access));
}

}  // namespace testing_support
