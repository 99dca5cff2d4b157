#pragma once
// Test support for web_fetch: a small threaded HTTP/1.0-style server on 127.0.0.1 (one request
// per connection, then close). Routes answer a fixed response or run a handler on the socket
// (a body that never ends, headers then silence). Stopping closes every connection, so a handler
// blocked on a client never outlives the test.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tools_test {

class Httpd {
 public:
  /// Writes to the client socket; `stopped` is a descriptor that becomes readable when the
  /// server stops (poll it with the client's to wait without a sleep).
  using Handler = std::function<void(int fd, int stopped)>;

  Httpd() {
    if (::pipe(stop_) != 0) throw std::runtime_error("pipe");
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_, 16) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("httpd: cannot listen");
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Httpd() {
    (void)!::write(stop_[1], "x", 1);
    acceptor_.join();
    {
      std::lock_guard lk(mu_);
      for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : threads_) t.join();
    for (int fd : conns_) ::close(fd);
    ::close(listen_);
    ::close(stop_[0]);
    ::close(stop_[1]);
  }
  Httpd(const Httpd&) = delete;

  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

  /// A fixed response for `path` (without the query string).
  void route(const std::string& path, int status, const std::string& type, const std::string& body,
             const std::string& extra_headers = "") {
    handle(path, [=](int fd, int) { send_all(fd, head(status, type, body.size(), extra_headers) + body); });
  }
  void redirect(const std::string& path, const std::string& location) {
    route(path, 302, "text/plain", "moved", "Location: " + location + "\r\n");
  }
  void handle(const std::string& path, Handler h) {
    std::lock_guard lk(mu_);
    routes_[path] = std::move(h);
  }
  /// The paths requested so far, in order.
  std::vector<std::string> requests() const {
    std::lock_guard lk(mu_);
    return requests_;
  }
  /// The request targets so far (paths with their query strings), in order.
  std::vector<std::string> targets() const {
    std::lock_guard lk(mu_);
    return targets_;
  }

  static std::string head(int status, const std::string& type, std::size_t length, const std::string& extra = "") {
    return "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(length) + "\r\nConnection: close\r\n" + extra + "\r\n";
  }
  /// false when the client went away.
  static bool send_all(int fd, const std::string& data) {
    for (std::size_t off = 0; off < data.size();) {
      const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

 private:
  static const char* reason(int status) {
    switch (status) {
      case 200: return "OK";
      case 202: return "Accepted";
      case 302: return "Found";
      case 404: return "Not Found";
      case 500: return "Internal Server Error";
      default: return "Status";
    }
  }

  void accept_loop() {
    while (true) {
      pollfd p[2] = {{listen_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) continue;
      if (p[1].revents) return;
      const int fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lk(mu_);
      conns_.push_back(fd);
      threads_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 65536) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, static_cast<std::size_t>(n));
    }
    const auto sp = req.find(' '), sp2 = req.find(' ', sp + 1);
    const std::string target = sp2 == std::string::npos ? "/" : req.substr(sp + 1, sp2 - sp - 1);
    const std::string path = target.substr(0, target.find('?'));
    Handler h;
    {
      std::lock_guard lk(mu_);
      requests_.push_back(path);
      targets_.push_back(target);
      if (auto it = routes_.find(path); it != routes_.end()) h = it->second;
    }
    if (h) h(fd, stop_[0]);
    else send_all(fd, head(404, "text/plain", 9) + "not found");
    ::shutdown(fd, SHUT_WR);
  }

  int listen_ = -1, port_ = 0, stop_[2] = {-1, -1};
  mutable std::mutex mu_;
  std::map<std::string, Handler> routes_;
  std::vector<std::string> requests_, targets_;
  std::vector<int> conns_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace tools_test
