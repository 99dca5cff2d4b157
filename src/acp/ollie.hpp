#pragma once
/// The bridge's connection to olliesrv: dialed on first use (as ollie-9p does: $OLLIE_ADDR, else
/// the `ollie` service of the namespace directory; attached as the hostowner), redialed on the
/// first use after it was lost. Helpers for the four kinds of file the bridge uses.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lib9p/async_client.hpp"
#include "lib9p/result.hpp"

namespace acp {

class Ollie {
 public:
  Ollie(asio::any_io_executor ex, std::string address) : ex_(ex), address_(std::move(address)) {}

  /// A Read file's content (walk, open, read to EOF).
  asio::awaitable<p9::Result<std::string>> read(std::string path);
  /// A Write file: the data written, then the clunk that runs the handler (its error is ours).
  asio::awaitable<p9::Status> write(std::string path, std::string data);
  /// An Rdwr exchange (ctl, new): the request, then the reply.
  asio::awaitable<p9::Result<std::string>> call(std::string path, std::string request);
  /// An opened fid, for Streams and `event`.
  asio::awaitable<p9::Result<p9::AsyncFid>> open(std::string path, std::uint8_t mode);
  /// Drops the connection after an error that means it is gone, so the next use redials.
  void check(const std::string& ename);

 private:
  /// A clone of the root fid, dialing and attaching first when there is no connection.
  asio::awaitable<p9::Result<p9::AsyncFid>> attach();
  /// attach(), dialing again once when the connection turns out to be lost.
  asio::awaitable<p9::Result<p9::AsyncFid>> root();

  asio::any_io_executor ex_;
  std::string address_;
  std::shared_ptr<p9::AsyncClient> client_;
  std::shared_ptr<p9::AsyncFid> root_;
};

/// Largest line read from a Stream (a block of `chat.raw`, an event).
inline constexpr std::size_t max_stream_line = 64 * 1024 * 1024;

/// The whole lines of a Stream fid (`chat.raw`, `event`).
class Lines {
 public:
  explicit Lines(p9::AsyncFid fid) : fid_(std::move(fid)) {}
  /// The next line without its newline; nullopt at EOF; an error when a read failed.
  asio::awaitable<p9::Result<std::optional<std::string>>> next();

 private:
  p9::AsyncFid fid_;
  std::string buf_;
};

/// True for the errors of a lost connection (olliesrv gone), as opposed to a file's own error.
bool connection_lost(const std::string& ename);

/// A reply of a file without its surrounding blanks (ids, names and plans end with a newline).
std::string trim(std::string_view s);

}  // namespace acp
