// The client library against the real server: dial strings, auth, long walks, several threads.
#include <gtest/gtest.h>

#include <future>

#include "lib9p/client.hpp"
#include "support/demofs.hpp"
#include "support/testserver.hpp"

using namespace p9;

namespace {

struct Client9p : ::testing::Test {
  std::shared_ptr<testing_support::DemoState> st = std::make_shared<testing_support::DemoState>();
  testing_support::TestServer srv{testing_support::demo_fs(st)};

  std::pair<std::shared_ptr<Client>, CFid> mount(const std::string& uname = "glenda") {
    auto c = Client::dial(srv.addr());
    EXPECT_TRUE(c) << (c ? "" : c.ename());
    auto root = (*c)->attach(uname);
    EXPECT_TRUE(root) << (root ? "" : root.ename());
    return {*c, std::move(*root)};
  }

  // A Tread of 100 bytes on an open fid, left pending: its tag and its reply to come.
  static std::pair<std::uint16_t, std::future<Result<Fcall>>> start_read(Client& c, const CFid& f) {
    auto got = std::make_shared<std::promise<Result<Fcall>>>();
    auto reply = got->get_future();
    Fcall t;
    t.type = Tread;
    t.fid = f.num();
    t.count = 100;
    auto tag = c.start(t, [got](Result<Fcall> r) { got->set_value(std::move(r)); });
    return {tag, std::move(reply)};
  }
};

}  // namespace

TEST_F(Client9p, ReadsAFile) {
  auto [c, root] = mount();
  auto f = root.walk("hello");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->open(OREAD));
  auto data = f->read_all();
  ASSERT_TRUE(data);
  EXPECT_EQ(*data, "hello, world\n");
}

TEST_F(Client9p, DialsAServiceNameInTheNamespaceDirectory) {
  std::string dir = srv.sock.substr(0, srv.sock.rfind('/'));
  setenv("NAMESPACE", dir.c_str(), 1);
  auto c = Client::dial("ollie");
  unsetenv("NAMESPACE");
  ASSERT_TRUE(c) << c.ename();
  EXPECT_TRUE((*c)->attach("glenda"));
}

TEST_F(Client9p, DialErrorsSayWhy) {
  auto c = Client::dial("unix!/nonexistent/dir/sock");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.ename(), "dial /nonexistent/dir/sock: No such file or directory");
  EXPECT_EQ(Client::dial("udp!x!1").ename(), "unknown network: udp");
  // A port past 65535 is refused, not wrapped round to another service's (99999 is 34463).
  EXPECT_EQ(Client::dial("tcp!127.0.0.1!99999").ename(), "bad address: tcp!127.0.0.1!99999: port out of range");
  EXPECT_EQ(Client::dial("tcp!127.0.0.1!0000065536").ename(), "bad address: tcp!127.0.0.1!0000065536: port out of range");
}

TEST_F(Client9p, ServesTcpToo) {
  ASSERT_TRUE(srv.srv->listen(*parse_address("tcp!127.0.0.1!0")));
  auto c = Client::dial("tcp!127.0.0.1!" + std::to_string(srv.srv->tcp_port()));
  ASSERT_TRUE(c) << c.ename();
  auto root = (*c)->attach("glenda");
  ASSERT_TRUE(root);
  auto f = root->walk("hello");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->open(OREAD));
  EXPECT_EQ(*f->read_all(), "hello, world\n");
}

TEST_F(Client9p, WalksMoreThanSixteenElements) {
  auto [c, root] = mount();
  std::string path;
  for (int i = 0; i < 20; i++) path += "item/a/../../";
  path += "item/b/value";
  auto f = root.walk(path);
  ASSERT_TRUE(f) << f.ename();
  ASSERT_TRUE(f->open(OREAD));
  EXPECT_EQ(*f->read_all(), "beta\n");
  auto bad = root.walk(path.substr(0, path.size() - 5) + "nosuch");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.ename(), "nosuch: file not found");
}

TEST_F(Client9p, AgentsAuthenticateWithTheirSecret) {
  auto c = *Client::dial(srv.addr());
  auto afid = c->auth("agent1");
  ASSERT_TRUE(afid) << afid.ename();
  EXPECT_EQ(afid->qid().type, QTAUTH);
  ASSERT_TRUE(afid->write("key-agent1"));
  auto root = c->attach("agent1", "", &*afid);
  ASSERT_TRUE(root) << root.ename();
  auto none = c->attach("agent1");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.ename(), "authentication required");
  auto wrong = c->auth("agent2");
  ASSERT_TRUE(wrong);
  ASSERT_TRUE(wrong->write("key-agent1"));
  auto r = c->attach("agent2", "", &*wrong);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "authentication failed");
  auto empty = c->auth("agent2");
  ASSERT_TRUE(empty);
  EXPECT_EQ(c->attach("agent2", "", &*empty).ename(), "authentication failed");
  // An afid made for one agent cannot attach another.
  EXPECT_EQ(c->attach("agent2", "", &*afid).ename(), "authentication failed");
}

TEST_F(Client9p, ManyThreadsShareOneConnection) {
  auto [c, root] = mount();
  std::vector<std::future<int>> done;
  for (int t = 0; t < 8; t++) {
    done.push_back(std::async(std::launch::async, [&root = root] {
      int ok = 0;
      for (int i = 0; i < 50; i++) {
        auto f = root.walk("item/a/value");
        if (!f || !f->open(OREAD)) continue;
        auto d = f->read_all();
        if (d && *d == "alpha\n") ok++;
      }
      return ok;
    }));
  }
  for (auto& d : done) EXPECT_EQ(d.get(), 50);
}

TEST_F(Client9p, FlushInterruptsAPendingRead) {
  auto [c, root] = mount();
  auto f = root.walk("log");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->open(OREAD));
  auto [tag, reply] = start_read(*c, *f);
  c->flush(tag);
  auto r = reply.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "interrupted");
}

TEST_F(Client9p, ServerStopEndsAPendingReadAtEOFThenHangsUp) {
  auto [c, root] = mount();
  auto f = root.walk("log");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->open(OREAD));
  auto [tag, reply] = start_read(*c, *f);
  ASSERT_TRUE(root.walk("hello"));  // answered after the server took the read in: it is pending
  srv.srv->stop();
  auto r = reply.get();
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(r->type, Rread);
  EXPECT_EQ(r->data, "");  // the stream's producer is gone: end of file
  auto after = root.walk("hello");  // in the moment it lingers for clunks
  ASSERT_FALSE(after);
  EXPECT_EQ(after.ename(), "server shutting down");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto later = root.walk("hello");
  ASSERT_FALSE(later);
  EXPECT_EQ(later.ename(), "connection closed");
}
