#pragma once
/// The 9P2000 server: one reader and one writer per connection, every request on the
/// connection's strand, protocol checked (fids, tags, modes, offsets) before a file system
/// sees a request, every reply sent exactly once. Like plan9port's lib9p srv.c.

#include <sys/types.h>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dial.hpp"
#include "fcall.hpp"
#include "result.hpp"

namespace p9 {

/// The connecting process, from SO_PEERCRED (Unix sockets only).
struct Peer {
  bool known = false;
  pid_t pid = -1;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  /// It runs with no_new_privs (as every sandboxed tool does), read at accept from the `NoNewPrivs:`
  /// line of /proc/<pid>/status and confirmed to be that process's through a pidfd; a process
  /// that cannot be read, or that was gone by then, counts as yes.
  bool no_new_privs = true;
  /// The tag of the listener that accepted the connection (Server::listen), 0 by default.
  std::uint64_t listener = 0;
};

/// A fid of one connection. The library owns num, qid, omode and the directory-read cursor;
/// the file system owns `file` (which file: copied by walk) and `aux` (per-open state).
struct Fid {
  std::uint32_t num = NOFID;
  Qid qid;
  std::string uid;       ///< the principal: uname of the attach this fid descends from
  int omode = -1;        ///< -1 while not open
  std::shared_ptr<void> file;
  std::shared_ptr<void> aux;
  Peer peer;
  /// Bytes the file system holds buffered for this fid's connection (write buffers, pending
  /// requests), shared by every fid of the connection: the file system charges and releases it
  /// and refuses a write that would pass the connection's cap.
  std::shared_ptr<std::size_t> conn_buffered;

  bool is_open() const { return omode >= 0; }
  bool is_dir() const { return qid.type & QTDIR; }

  // Directory read cursor (library-owned): the listing taken at offset 0.
  std::vector<Dir> dir_entries;
  std::size_t dir_index = 0;
  std::uint64_t dir_offset = 0;
};

/// What a file system implements. Synchronous calls must not block; read, write, clunk and wstat
/// may wait (a blocked read is a suspended coroutine; Tflush cancels it through the coroutine's
/// cancellation slot, so waits must be cancellable asio operations).
class FileServer {
 public:
  virtual ~FileServer() = default;

  /// Tauth. Default: `authentication not required`. To authenticate, set afid.qid (QTAUTH) and
  /// afid.file, and serve reads and writes of that fid.
  virtual Status auth(Fid& afid, const std::string& uname, const std::string& aname);
  /// Tattach: set fid.file and fid.qid (a directory). afid is null when NOFID was given.
  virtual Status attach(Fid& fid, Fid* afid, const std::string& uname, const std::string& aname) = 0;
  /// Moves fid (a working copy) one element on; sets fid.file and fid.qid. ".." is included.
  virtual Status walk1(Fid& fid, const std::string& name) = 0;
  /// A Twalk of no names (a clone) of a fid that is not an auth fid. Default: allowed.
  virtual Status clone(const Fid& fid);
  /// Topen: mode is checked by the file system (permissions); set per-open state in fid.aux.
  virtual Status open(Fid& fid, std::uint8_t mode) = 0;
  /// The directory's entries, taken when a read starts at offset 0.
  virtual Result<std::vector<Dir>> readdir(Fid& fid) = 0;
  /// Whether a directory read that goes on past offset 0 may still be served from the entries
  /// taken (a directory whose object was killed meanwhile answers its error). Default: yes.
  virtual Status dir_alive(Fid& fid);
  /// Answers a Tread, Twrite or Tclunk at once when that needs no waiting (the common case:
  /// no coroutine is started for it); nullopt sends the request down the waiting path below.
  /// An answered Tclunk must have done everything clunk() would.
  virtual std::optional<Fcall> answer_now(Fid& fid, const Fcall& t);
  virtual asio::awaitable<Result<std::string>> read(Fid& fid, std::uint64_t offset, std::uint32_t count) = 0;
  virtual asio::awaitable<Result<std::uint32_t>> write(Fid& fid, std::uint64_t offset, std::string data) = 0;
  /// An explicit Tclunk of an open fid (not called when a fid dies with its connection).
  virtual asio::awaitable<Status> clunk(Fid& fid);
  /// A read still waiting on `fid` when the server stops: true answers it end of file (a stream
  /// that ends), false `server shutting down` (a reply that will not come, not an empty one).
  virtual bool ends_at_shutdown(const Fid& fid);
  virtual Result<Dir> stat(Fid& fid) = 0;
  /// Default: accepts a wstat that changes nothing, else `wstat not supported`.
  virtual asio::awaitable<Status> wstat(Fid& fid, const Dir& changes);
  /// Any Tcreate on a fid not open. Default: `create not supported`, whatever the fid and name
  /// (spec §1.5: not supported anywhere); a server that creates checks that the fid is a
  /// directory and the name is neither `.` nor `..`.
  virtual Status create(Fid& fid, const std::string& name, std::uint32_t perm, std::uint8_t mode);
  virtual Status remove(Fid& fid);
};

/// True when every field of d is "don't touch" (a no-op or sync Twstat).
bool is_null_wstat(const Dir& d);

/// Fids a connection may hold, and auth fids among them (Tauth and clones of an auth fid); past
/// them: `too many fids`, `too many auth fids`. Before its first Tattach a connection can hold
/// only auth fids, so MAX_AUTH_FIDS is its cap then.
inline constexpr std::size_t MAX_FIDS = 4096;
inline constexpr std::size_t MAX_AUTH_FIDS = 8;
/// Fids (not auth fids) of one principal (Fid::uid) over all its sandboxed connections (peers
/// with no_new_privs): a tool that opens many connections holds no more (`too many fids`).
inline constexpr std::size_t MAX_FIDS_PER_UID = 4 * MAX_FIDS;

/// Half of RLIMIT_NOFILE: the rest is left to everything else the process opens.
std::size_t default_max_connections();

struct ServerOptions {
  std::uint32_t max_msize = MAX_MSIZE;
  /// Connections served at once; one accepted past it is closed at once.
  std::size_t max_connections = default_max_connections();
  /// A connection without a successful Tattach this long after it was accepted is closed.
  std::chrono::milliseconds attach_timeout = std::chrono::seconds(10);
  /// A connection whose replies wait unread this long (the client reads nothing) is closed.
  std::chrono::milliseconds write_timeout = std::chrono::seconds(30);
  /// Called with the number of attached connections (those with a successful Tattach) each time
  /// one attaches for the first time or an attached one closes (for idle timers); connections
  /// that never attach are not counted. It runs under the server's lock: keep it quick and do
  /// not call the Server.
  std::function<void(std::size_t attached)> on_connections;
};

/// Serves one FileServer on any number of listeners; each connection has its own fid and
/// tag tables and runs on its own strand. Connections are spread round-robin over the given
/// io_contexts (one per thread keeps a connection's work on one thread: no cross-thread wake-ups).
class Server {
 public:
  Server(asio::io_context& io, std::shared_ptr<FileServer> fs, ServerOptions opt = {});
  Server(std::vector<asio::io_context*> ios, std::shared_ptr<FileServer> fs, ServerOptions opt = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Starts listening. A Unix socket is created 0600, its directory 0700 if it must be made;
  /// a stale socket file is replaced. The socket is removed by stop(). Every connection it
  /// accepts carries `tag` in its Peer (who may attach may depend on the listener).
  Status listen(const Address& addr, std::uint64_t tag = 0);
  /// Closes the Unix listener on `path` (removing the socket); its connections stay.
  void unlisten(const std::string& path);
  /// The TCP port actually bound (for tcp!host!0), else 0.
  std::uint16_t tcp_port() const;
  /// Closes every listener (removing Unix sockets) and every connection: pending reads are
  /// answered with end of file, other pending requests with `server shutting down`.
  void stop();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace p9
