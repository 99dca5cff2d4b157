#pragma once
/// The blocking 9P2000 client (like plan9port's lib9pclient), for ollie-9p, tools and tests:
/// dial, version, auth, attach, and fids to walk, open, read, write, stat, create, remove and
/// clunk. Safe to use from several threads: their requests are multiplexed over the one
/// connection by tag. Its protocol state is the Mux and Walk it shares with the AsyncClient;
/// this layer is POSIX sockets, a reader thread and a wait for each reply. No Asio.

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fcall.hpp"
#include "mux.hpp"
#include "result.hpp"

namespace p9 {

class CFid;

class Client : public std::enable_shared_from_this<Client> {
 public:
  /// Dials `unix!/path`, `tcp!host!port` or a service name, and negotiates 9P2000.
  static Result<std::shared_ptr<Client>> dial(std::string_view address, std::uint32_t msize = MAX_MSIZE);
  /// Takes ownership of a connected stream socket and negotiates 9P2000.
  static Result<std::shared_ptr<Client>> from_fd(int fd, std::uint32_t msize = MAX_MSIZE);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Sends t (its tag is chosen here) and waits for the reply. An Rerror becomes an error.
  Result<Fcall> rpc(Fcall t);
  /// Sends t and calls done with the reply from the reader thread; returns the tag used.
  std::uint16_t start(Fcall t, Mux::Done done);
  /// Flushes a pending request (flush(5)) and waits for the Rflush; its callback then has had
  /// its reply, or gets `interrupted` if the server dropped it.
  void flush(std::uint16_t tag);

  /// Tauth; an error (e.g. `authentication not required`) when the server does not authenticate.
  Result<CFid> auth(const std::string& uname, const std::string& aname = "");
  /// Tattach; afid null for NOFID.
  Result<CFid> attach(const std::string& uname, const std::string& aname = "", const CFid* afid = nullptr);

  /// Hangs up: pending requests fail with `connection closed`.
  void close();

 private:
  friend class CFid;
  explicit Client(int fd);
  void reader();
  void send(const std::vector<std::uint8_t>& frames);

  int fd_;
  Mux mux_;
  std::mutex write_mu_;  // one writer at a time on the socket
  std::thread reader_;
};

/// One fid of a client. Move-only; clunked when destroyed (unless already clunked or removed).
class CFid {
 public:
  CFid() = default;
  CFid(std::shared_ptr<Client> c, std::uint32_t fid, Qid qid) : c_(std::move(c)), fid_(fid), qid_(qid) {}
  CFid(CFid&& o) noexcept { *this = std::move(o); }
  CFid& operator=(CFid&& o) noexcept;
  ~CFid();

  /// Walks to a slash-separated path relative to this fid (empty, "." and "/" clone it),
  /// 16 elements per Twalk. A missing element gives `<element>: file not found`.
  Result<CFid> walk(std::string_view path) const;
  Status open(std::uint8_t mode);
  Status create(const std::string& name, std::uint32_t perm, std::uint8_t mode);
  /// Reads at most count bytes at the fid's offset and advances it; an empty result is EOF.
  Result<std::string> read(std::uint32_t count = 0);
  Result<std::string> pread(std::uint64_t offset, std::uint32_t count);
  /// Reads until EOF.
  Result<std::string> read_all();
  /// Writes all of data at the fid's offset in iounit-sized pieces; an empty data sends one
  /// zero-length Twrite.
  Result<std::size_t> write(std::string_view data);
  Result<std::uint32_t> pwrite(std::uint64_t offset, std::string_view data);
  Result<Dir> stat() const;
  Status wstat(const Dir& d);
  /// Every entry of an opened directory.
  Result<std::vector<Dir>> dirread_all();
  Status clunk();
  Status remove();

  std::uint32_t num() const { return fid_; }
  const Qid& qid() const { return qid_; }
  std::uint64_t offset() const { return offset_; }
  void seek(std::uint64_t off) { offset_ = off; }
  Client& client() const { return *c_; }

 private:
  /// Tclunk or Tremove: the fid is gone either way, and its number free after the reply.
  Status end(std::uint8_t type);

  std::shared_ptr<Client> c_;
  std::uint32_t fid_ = NOFID;
  Qid qid_;
  std::uint64_t offset_ = 0;
};

}  // namespace p9
