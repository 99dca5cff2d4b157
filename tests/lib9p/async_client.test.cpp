// The asynchronous client from coroutines on a one-thread io_context: against the real lib9p
// server (demofs) over real Unix sockets, and against a server played by hand where the test must
// see the exact frames (flushes, late replies, hang-ups).
#include "lib9p/async_client.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <cstring>
#include <future>

#include "lib9p/client.hpp"
#include "lib9p/errors.hpp"
#include "lib9p/tmsg.hpp"
#include "support/demofs.hpp"
#include "support/coro.hpp"
#include "support/testserver.hpp"

using namespace p9;
using namespace std::chrono_literals;
using testing_support::aborted;
using testing_support::must;
using testing_support::OneThread;

namespace {

template <class F>
bool eventually(F ok) {
  for (int i = 0; i < 1000 && !ok(); i++) std::this_thread::sleep_for(10ms);
  return ok();
}

struct AsyncClient9p : ::testing::Test {
  std::shared_ptr<testing_support::DemoState> st = std::make_shared<testing_support::DemoState>();
  testing_support::TestServer srv{testing_support::demo_fs(st)};
  OneThread t;

  asio::any_io_executor ex() { return t.io.get_executor(); }

  asio::awaitable<std::pair<std::shared_ptr<AsyncClient>, AsyncFid>> mount(std::string address) {
    auto c = must(co_await AsyncClient::dial(ex(), address), "dial");
    auto root = must(co_await c->attach("glenda"), "attach");
    co_return std::pair{c, std::move(root)};
  }
};

}  // namespace

TEST_F(AsyncClient9p, ReadsWritesAndStatsFiles) {
  t.run([&]() -> asio::awaitable<void> {
    auto [c, root] = co_await mount(srv.addr());
    auto f = must(co_await root.walk("hello"), "walk");
    must(co_await f.open(OREAD), "open");
    EXPECT_EQ(must(co_await f.read_all(1u << 20), "read"), "hello, world\n");
    // A server that sends more than the reader takes is cut off, not kept (a hostile toolsrv).
    auto g = must(co_await root.walk("hello"), "walk");
    must(co_await g.open(OREAD), "open");
    EXPECT_EQ((co_await g.read_all(12)).ename(), "reply too large");
    EXPECT_EQ(must(co_await f.stat(), "stat").name, "hello");
    auto s = must(co_await root.walk("sink"), "walk sink");
    must(co_await s.open(OWRITE), "open sink");
    EXPECT_EQ(must(co_await s.write("data\n"), "write"), 5u);
    must(co_await s.clunk(), "clunk");
  }());
  std::lock_guard lk(st->mu);
  EXPECT_EQ(st->writes, std::vector<std::string>{"data\n"});
}

TEST_F(AsyncClient9p, CallWalksOpensWritesAndReadsTheReplyOnOneFid) {
  t.run([&]() -> asio::awaitable<void> {
    auto [c, root] = co_await mount(srv.addr());
    EXPECT_EQ(must(co_await root.call("ctl", "hi", 1u << 20), "call"), "reply:HI");
    EXPECT_EQ((co_await root.call("ctl", "hi", 7)).ename(), "reply too large");
    EXPECT_EQ((co_await root.call("nosuch", "hi", 1u << 20)).ename(), "nosuch: file not found");
    EXPECT_EQ((co_await root.call("ctl", "bad", 1u << 20)).ename(), "unknown command: bad");
    EXPECT_EQ((co_await root.call("hello", "x", 1u << 20)).ename(), err::permission_denied);
    // The root fid is still usable, and the calls' fids were clunked: a walk to newfid 1 works.
    EXPECT_EQ(must(co_await root.call("deflt", "", 1u << 20), "call"), "got status\n");
  }());
  std::lock_guard lk(st->mu);
  EXPECT_EQ(st->requests, (std::vector<std::string>{"hi", "hi", "bad"}));
}

// The first read goes out with the walk, open and write; a reply of an iounit or more is read on.
TEST_F(AsyncClient9p, CallReadsAReplyOfAnIounitOrMoreToItsEnd) {
  t.run([&]() -> asio::awaitable<void> {
    auto [c, root] = co_await mount(srv.addr());
    const std::size_t unit = c->iounit();
    for (const std::size_t size : {unit - 7, unit - 6, unit - 5, 3 * unit}) {  // replies of iounit-1 ... 3 iounits+6
      const std::string request(size, 'q');
      const auto reply = must(co_await root.call("ctl", request, 1u << 20), "call");
      EXPECT_EQ(reply.size(), size + 6) << size;
      EXPECT_EQ(reply, "reply:" + std::string(size, 'Q')) << size;
    }
  }());
  std::lock_guard lk(st->mu);
  ASSERT_EQ(st->requests.size(), 4u);
  EXPECT_EQ(st->requests.back().size(), 3 * std::size_t{st->requests.front().size() + 7});
}

TEST_F(AsyncClient9p, WalksMoreThanSixteenElements) {
  t.run([&]() -> asio::awaitable<void> {
    auto [c, root] = co_await mount(srv.addr());
    std::string path;
    for (int i = 0; i < 20; i++) path += "item/a/../../";
    auto f = must(co_await root.walk(path + "item/b/value"), "walk");
    must(co_await f.open(OREAD), "open");
    EXPECT_EQ(must(co_await f.read_all(1u << 20), "read"), "beta\n");
    EXPECT_EQ((co_await root.walk(path + "item/nosuch")).ename(), "nosuch: file not found");
    EXPECT_EQ(must(co_await root.call(path + "ctl", "x", 1u << 20), "long call"), "reply:X");
  }());
}

TEST_F(AsyncClient9p, AttachesWithASecretWrittenToTheAuthFid) {
  t.run([&]() -> asio::awaitable<void> {
    auto c = must(co_await AsyncClient::dial(ex(), srv.addr()), "dial");
    auto root = must(co_await c->attach_with_secret("agent1", "key-agent1"), "attach");
    auto f = must(co_await root.walk("item/a/value"), "walk");
    must(co_await f.open(OREAD), "open");
    EXPECT_EQ(must(co_await f.read_all(1u << 20), "read"), "alpha\n");
    EXPECT_EQ((co_await c->attach_with_secret("agent2", "key-agent1")).ename(), err::auth_failed);
    EXPECT_EQ((co_await c->attach("agent1")).ename(), err::auth_required);
    EXPECT_EQ((co_await c->auth("glenda")).ename(), err::auth_not_required);
  }());
}

TEST_F(AsyncClient9p, DialsUnixAndTcpAndSaysWhyItCannot) {
  ASSERT_TRUE(srv.srv->listen(*parse_address("tcp!127.0.0.1!0")));
  const std::string tcp = "tcp!127.0.0.1!" + std::to_string(srv.srv->tcp_port());
  t.run([&]() -> asio::awaitable<void> {
    auto [c, root] = co_await mount(tcp);
    EXPECT_EQ(must(co_await root.call("ctl", "tcp", 1u << 20), "call"), "reply:TCP");
    EXPECT_EQ((co_await AsyncClient::dial(ex(), "unix!/nonexistent/dir/sock")).ename(),
              "dial /nonexistent/dir/sock: No such file or directory");
    EXPECT_EQ((co_await AsyncClient::dial(ex(), "udp!x!1")).ename(), "unknown network: udp");
  }());
}

TEST_F(AsyncClient9p, ManyAwaitersShareOneConnection) {
  constexpr int n = 200;
  t.run([&]() -> asio::awaitable<void> {
    auto [c, root] = co_await mount(srv.addr());
    std::atomic<int> right{0}, ended{0};
    auto all = std::make_shared<Handoff<bool>>();
    for (int i = 0; i < n; i++) {
      asio::co_spawn(
          ex(),
          [&, i]() -> asio::awaitable<void> {
            auto r = co_await root.call("ctl", "n" + std::to_string(i), 1u << 20);
            if (r && *r == "reply:N" + std::to_string(i)) right++;
          },
          [&](std::exception_ptr) {
            if (++ended == n) all->set(true);
          });
    }
    co_await all->get();
    EXPECT_EQ(right, n);
  }());
}

// A server thread and an agent's client share one thread (as in olliesrv): a request left
// waiting, 200 concurrent ones, and a blocking client on another connection are all served.
TEST(AsyncClientOneThread, ServesItsOwnServerAndOtherConnectionsWhileRequestsWait) {
  auto st = std::make_shared<testing_support::DemoState>();
  testing_support::TempDir dir;
  const std::string sock = dir.path + "/ns/ollie";
  asio::io_context io;
  auto server = std::make_unique<Server>(io, testing_support::demo_fs(st));
  ASSERT_TRUE(server->listen(*parse_address("unix!" + sock)));
  std::thread thread([&] { io.run(); });

  asio::cancellation_signal stop_waiting;
  std::promise<std::exception_ptr> waiting_ended;
  std::promise<int> served;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto c = must(co_await AsyncClient::dial(io.get_executor(), "unix!" + sock), "dial");
    auto root = std::make_shared<AsyncFid>(must(co_await c->attach("glenda"), "attach"));
    asio::co_spawn(io, [root]() -> asio::awaitable<void> { (void)co_await root->call("slow", "x", 1u << 20); },
                   asio::bind_cancellation_slot(stop_waiting.slot(), [&](std::exception_ptr e) { waiting_ended.set_value(e); }));
    auto count = std::make_shared<std::atomic<int>>(0), ended = std::make_shared<std::atomic<int>>(0);
    auto all = std::make_shared<Handoff<bool>>();
    for (int i = 0; i < 200; i++)
      asio::co_spawn(io, [root, count]() -> asio::awaitable<void> {
        auto f = co_await root->walk("item/a/value");
        if (f && co_await f->open(OREAD)) {
          auto d = co_await f->read_all(1u << 20);
          if (d && *d == "alpha\n") (*count)++;
        }
        auto r = co_await root->call("ctl", "x", 1u << 20);
        if (r && *r == "reply:X") (*count)++;
      }, [ended, all](std::exception_ptr) {
        if (++*ended == 200) all->set(true);
      });
    co_await all->get();
    served.set_value(*count);
  }, [&](std::exception_ptr e) { if (e) served.set_exception(e); });

  auto count = served.get_future();
  ASSERT_EQ(count.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(count.get(), 400);
  {
    auto b = Client::dial("unix!" + sock);  // another connection on the same thread
    ASSERT_TRUE(b) << b.ename();
    auto root = (*b)->attach("glenda");
    ASSERT_TRUE(root);
    auto f = root->walk("hello");
    ASSERT_TRUE(f && f->open(OREAD));
    EXPECT_EQ(*f->read_all(), "hello, world\n");
  }
  asio::post(io, [&] { stop_waiting.emit(asio::cancellation_type::terminal); });
  auto ended = waiting_ended.get_future();
  ASSERT_EQ(ended.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(aborted(ended.get()));
  server->stop();
  thread.join();
}

// ---- cancellation against the real server ------------------------------------------------

namespace {

// A file whose Rdwr handler waits until flushed, counting the handlers still waiting.
struct Held {
  std::atomic<int> waiting{0};
  std::shared_ptr<virtfs::Signal> never = std::make_shared<virtfs::Signal>();
};
struct HeldCtx {
  std::shared_ptr<Held> held;
};

std::shared_ptr<virtfs::Adapter<HeldCtx>> held_fs(std::shared_ptr<Held> held) {
  using D = virtfs::Dsl<HeldCtx>;
  auto tree = virtfs::build(D::Dir("/", virtfs::Mode{0555},
      D::Leaf("hold", virtfs::Mode{0666}, virtfs::Doc{"waits until flushed"},
              virtfs::Rdwr([](HeldCtx& c, std::string) -> asio::awaitable<Result<std::string>> {
                c.held->waiting++;
                struct Count {
                  std::atomic<int>& n;
                  ~Count() { n--; }
                } count{c.held->waiting};
                co_await c.held->never->wait(c.held->never->version());
                co_return "woke\n";
              }))));
  if (!tree) throw std::runtime_error(tree.ename());
  virtfs::Access<HeldCtx> access;
  access.hostowner = "glenda";
  access.attach = [](const virtfs::AttachRequest&) -> Result<virtfs::Principal> { return virtfs::Principal{"glenda", "", true}; };
  access.root = [held](const virtfs::Principal&) { return HeldCtx{held}; };
  return std::make_shared<virtfs::Adapter<HeldCtx>>(std::move(*tree), std::move(access));
}

}  // namespace

TEST_F(AsyncClient9p, LosingARaceToATimerFlushesTheCallAndTheServerReleasesIt) {
  using namespace asio::experimental::awaitable_operators;
  auto held = std::make_shared<Held>();
  testing_support::TestServer hs{held_fs(held)};
  t.run([&]() -> asio::awaitable<void> {
    auto [c, root] = co_await mount(hs.addr());
    asio::steady_timer timer(ex(), 50ms);
    const auto began = std::chrono::steady_clock::now();
    auto r = co_await (root.call("hold", "x", 1u << 20) || timer.async_wait(asio::use_awaitable));
    EXPECT_EQ(r.index(), 1u);
    EXPECT_LT(std::chrono::steady_clock::now() - began, 2s);
    // The connection goes on: a second call, cancelled the same way.
    timer.expires_after(50ms);
    r = co_await (root.call("hold", "y", 1u << 20) || timer.async_wait(asio::use_awaitable));
    EXPECT_EQ(r.index(), 1u);
  }());
  EXPECT_TRUE(eventually([&] { return held->waiting == 0; })) << held->waiting << " handlers still wait";
}

TEST_F(AsyncClient9p, ACancellationSignalEndsAPendingReadAtOnce) {
  auto mounted = t.run([&]() -> asio::awaitable<std::pair<std::shared_ptr<AsyncClient>, std::shared_ptr<AsyncFid>>> {
    auto [c, root] = co_await mount(srv.addr());
    auto f = must(co_await root.walk("log"), "walk");
    must(co_await f.open(OREAD), "open");
    co_return std::pair{c, std::make_shared<AsyncFid>(std::move(f))};
  }());
  auto log = mounted.second;
  asio::cancellation_signal sig;
  auto f = t.start(log->read(), sig);
  std::this_thread::sleep_for(50ms);
  t.cancel(sig);
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(aborted(f.get()));
  // The fid reads on once the log has something.
  st->log->append("line\n");
  auto r = t.run(log->read());
  ASSERT_TRUE(r) << r.ename();
  EXPECT_EQ(*r, "line\n");
  t.run([&]() -> asio::awaitable<void> {  // dropped on the io thread
    log.reset();
    mounted = {};
    co_return;
  }());
}

// ---- against a server played by hand -----------------------------------------------------

namespace {

// One connection to a 9P "server" the test plays frame by frame on a Unix socket.
class Played {
 public:
  Played() : path_(dir_.path + "/played") {
    lfd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path_.c_str(), sizeof sa.sun_path - 1);
    if (::bind(lfd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd_, 4) != 0)
      throw std::runtime_error("listen " + path_);
  }
  ~Played() {
    hang_up();
    ::close(lfd_);
  }
  std::string addr() const { return "unix!" + path_; }

  /// Accepts the client and answers its Tversion and Tattach.
  void accept() {
    fd_ = ::accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
    auto v = expect(Tversion);
    Fcall r;
    r.type = Rversion;
    r.tag = v.tag;
    r.msize = 8192;
    r.version = VERSION9P;
    send(r);
    auto a = expect(Tattach);
    answer(a);
  }
  /// The next message, which must be of type `type`.
  Fcall expect(std::uint8_t type) {
    for (;;) {
      if (buf_.size() >= 4) {
        std::uint32_t size = buf_[0] | buf_[1] << 8 | buf_[2] << 16 | std::uint32_t(buf_[3]) << 24;
        if (buf_.size() >= size) {
          auto f = decode({buf_.data(), size});
          buf_.erase(buf_.begin(), buf_.begin() + size);
          if (!f) throw std::runtime_error("bad frame: " + f.ename());
          if (f->type != type) throw std::runtime_error(std::string("got ") + type_name(f->type) + ", not " + type_name(type));
          return *f;
        }
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) throw std::runtime_error(std::string("no ") + type_name(type));
      std::uint8_t tmp[8192];
      ssize_t n = ::read(fd_, tmp, sizeof tmp);
      if (n <= 0) throw std::runtime_error("client hung up");
      buf_.insert(buf_.end(), tmp, tmp + n);
    }
  }
  /// The plain success reply to t (one qid for a walk).
  void answer(const Fcall& t) {
    Fcall r;
    r.type = t.type + 1;
    r.tag = t.tag;
    if (t.type == Twalk) r.wqid.assign(t.wname.size(), Qid{});
    send(r);
  }
  void send(const Fcall& r) {
    auto b = encode(r);
    if (!b || ::send(fd_, b->data(), b->size(), MSG_NOSIGNAL) != static_cast<ssize_t>(b->size())) throw std::runtime_error("send");
  }
  /// Something has arrived that expect() has not taken yet.
  bool pending() {
    pollfd p{fd_, POLLIN, 0};
    return !buf_.empty() || ::poll(&p, 1, 0) > 0;
  }
  void hang_up() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  testing_support::TempDir dir_;
  std::string path_;
  int lfd_ = -1, fd_ = -1;
  std::vector<std::uint8_t> buf_;
};

}  // namespace

struct AsyncClientPlayed : AsyncClient9p {
  Played peer;
  std::shared_ptr<AsyncClient> c;
  std::shared_ptr<AsyncFid> root;

  void SetUp() override {
    auto mounted = t.start(mount(peer.addr()));
    peer.accept();
    ASSERT_EQ(mounted.wait_for(5s), std::future_status::ready);
    auto [client, fid] = mounted.get();
    c = client;
    root = std::make_shared<AsyncFid>(std::move(fid));
  }
  void TearDown() override {
    t.run([&]() -> asio::awaitable<void> {  // drop them on the io thread
      root.reset();
      c.reset();
      co_return;
    }());
  }

};

TEST_F(AsyncClientPlayed, CancellationSendsTflushEndsTheCoroutineAtOnceAndDropsTheLateReply) {
  asio::cancellation_signal sig;
  auto ended = t.start(c->rpc(tmsg::read(root->num(), 0, 100)), sig);
  auto tread = peer.expect(Tread);
  t.cancel(sig);
  auto flush = peer.expect(Tflush);
  EXPECT_EQ(flush.oldtag, tread.tag);
  ASSERT_EQ(ended.wait_for(2s), std::future_status::ready) << "the coroutine waited for the Rflush";
  EXPECT_TRUE(aborted(ended.get()));
  // A request sent while the flush is pending takes another tag; the late Rread is dropped.
  auto stat = t.start(c->rpc(tmsg::on_fid(Tstat, root->num())));
  auto tstat = peer.expect(Tstat);
  EXPECT_NE(tstat.tag, tread.tag);
  Fcall late;
  late.type = Rread;
  late.tag = tread.tag;
  late.data = "late";
  peer.send(late);
  peer.answer(flush);
  Fcall rstat;
  rstat.type = Rerror;
  rstat.tag = tstat.tag;
  rstat.ename = "no stat here";
  peer.send(rstat);
  ASSERT_EQ(stat.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(stat.get().ename(), "no stat here");
}

TEST_F(AsyncClientPlayed, ACancelledWalkClunksTheFidItMayHaveMadeOnceTheFlushIsOver) {
  asio::cancellation_signal sig;
  auto ended = t.start(root->walk("a"), sig);
  auto twalk = peer.expect(Twalk);
  t.cancel(sig);
  auto flush = peer.expect(Tflush);
  ASSERT_EQ(ended.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(aborted(ended.get()));
  peer.answer(twalk);  // the walk made newfid after all
  peer.answer(flush);
  auto clunk = peer.expect(Tclunk);
  EXPECT_EQ(clunk.fid, twalk.newfid);
  peer.answer(clunk);
}

// A dropped fid's Tclunk waits for the next request and goes out in front of it, in one write
// (the timer that sends it alone after 5 ms is what the test above sees).
TEST_F(AsyncClientPlayed, AHeldClunkGoesOutInFrontOfTheNextRequest) {
  auto walked = t.start(root->walk("a"));
  auto twalk = peer.expect(Twalk);
  peer.answer(twalk);
  ASSERT_EQ(walked.wait_for(2s), std::future_status::ready);
  auto fid = std::make_shared<AsyncFid>(must(walked.get(), "walk"));
  const auto dropped = std::chrono::steady_clock::now();
  t.run([&]() -> asio::awaitable<void> {
    fid.reset();
    co_return;
  }());
  // Only meaningful while the hold lasts: a descheduled test thread may look after it ended.
  if (std::chrono::steady_clock::now() - dropped < 3ms) {
    EXPECT_FALSE(peer.pending()) << "the Tclunk went out alone";
  }
  auto stat = t.start(c->rpc(tmsg::on_fid(Tstat, root->num())));
  auto clunk = peer.expect(Tclunk);
  EXPECT_EQ(clunk.fid, twalk.newfid);
  auto tstat = peer.expect(Tstat);
  peer.answer(clunk);
  Fcall r;
  r.type = Rerror;
  r.tag = tstat.tag;
  r.ename = "no stat here";
  peer.send(r);
  ASSERT_EQ(stat.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(stat.get().ename(), "no stat here");
}

TEST_F(AsyncClientPlayed, LosingTheConnectionFailsEveryPendingRequestAndEveryLaterOne) {
  std::vector<std::future<Result<Fcall>>> reads;
  for (int i = 0; i < 20; i++) reads.push_back(t.start(c->rpc(tmsg::read(root->num(), 0, 100))));
  for (int i = 0; i < 20; i++) peer.expect(Tread);
  peer.hang_up();
  for (auto& r : reads) {
    ASSERT_EQ(r.wait_for(2s), std::future_status::ready);
    EXPECT_EQ(r.get().ename(), err::hung_up);
  }
  EXPECT_EQ(t.run(c->rpc(tmsg::on_fid(Tstat, root->num()))).ename(), err::hung_up);
}

TEST_F(AsyncClientPlayed, CloseFailsEveryPendingRequest) {
  auto read = t.start(c->rpc(tmsg::read(root->num(), 0, 100)));
  peer.expect(Tread);
  c->close();
  ASSERT_EQ(read.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(read.get().ename(), err::hung_up);
}

TEST_F(AsyncClientPlayed, RefusesRequestsBeyondTheCapOfTagsInFlight) {
  std::vector<std::future<Result<Fcall>>> reads;
  for (std::size_t i = 0; i <= Mux::MAX_IN_FLIGHT; i++)
    reads.push_back(t.start(c->rpc(tmsg::read(root->num(), 0, 100))));
  ASSERT_EQ(reads.back().wait_for(2s), std::future_status::ready);
  EXPECT_EQ(reads.back().get().ename(), "too many requests in flight");
  peer.hang_up();
  for (std::size_t i = 0; i < Mux::MAX_IN_FLIGHT; i++) EXPECT_EQ(reads[i].get().ename(), err::hung_up);
}

TEST_F(AsyncClientPlayed, AReplyLargerThanTheMsizeEndsTheConnection) {
  auto read = t.start(c->rpc(tmsg::read(root->num(), 0, 100)));
  auto tread = peer.expect(Tread);
  Fcall r;
  r.type = Rread;
  r.tag = tread.tag;
  r.data.assign(9000, 'x');  // over the 8192 agreed
  peer.send(r);
  ASSERT_EQ(read.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(read.get().ename(), "bad frame size from server: " + std::to_string(encoded_size(r)));
}
