#pragma once
/// fakeprovider: a local HTTP/1.1 server speaking the wire formats of the LLM providers
/// (openai, openrouter, copilot, anthropic, ollama, gemini, kiro) from a scripted JSON
/// transcript, with injected faults. doc/fakeprovider.md describes the script format.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace fakeprovider {

/// A request as the server received it.
struct Recorded {
  std::string method;
  std::string path;                            ///< with the query string
  std::map<std::string, std::string> headers;  ///< names in lower case
  std::string body;
  bool client_closed = false;                  ///< the client went away before the end
  std::size_t connection = 0;                  ///< which accepted connection carried it: 1, 2, …
};

class Server {
 public:
  /// Listens on 127.0.0.1:`port` (0: an ephemeral port) and serves `script` (§ format).
  explicit Server(nlohmann::json script = nlohmann::json::object(), int port = 0);
  /// Stops serving, closing every connection.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The port listened on.
  int port() const { return port_; }
  /// "http://127.0.0.1:<port>".
  std::string url() const;
  /// Appends one scripted response to the queue.
  void push(nlohmann::json response);
  /// Every request received so far, in arrival order.
  std::vector<Recorded> requests() const;
  /// With false, a request's body is let go once it is answered (requests() then shows it empty):
  /// for the round bench, whose thousands of requests would otherwise grow the fake by their size
  /// every round, as no provider's server costs its client.
  void keep_bodies(bool keep) { keep_bodies_ = keep; }
  /// Closes the listener and every connection, and joins the threads.
  void stop();
  /// CPU time its connection threads have spent on requests answered so far, in ms (for the
  /// benches: the provider's share of a round).
  double cpu_ms() const { return static_cast<double>(cpu_ns_.load()) / 1e6; }
  /// Requests answered so far (their responses sent whole).
  std::size_t answered() const;
  /// Waits until `n` requests have been answered, at most `limit`; false on the limit. Only
  /// the answer that reaches `n` wakes the waiter (the benches wait on a turn's last request).
  bool wait_answered(std::size_t n, std::chrono::milliseconds limit);

 private:
  void accept_loop();
  void serve(int fd, std::size_t connection);
  /// Reads one request from `fd` (after what `buf` holds) and answers it; false when the
  /// connection ends with it.
  bool answer_one(int fd, std::size_t connection, std::string& buf);
  nlohmann::json next_response(const std::string& body);
  void record_closed(std::size_t index);

  nlohmann::json script_;
  nlohmann::json models_, route_faults_;  // the script's, read once
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> cpu_ns_{0};
  std::atomic<bool> keep_bodies_{true};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable answered_cv_;
  std::size_t answered_ = 0, wake_at_ = 0;
  std::deque<nlohmann::json> queue_;
  std::deque<Recorded> requests_;  // kept where they are: a connection reads its own while others append
  std::vector<int> conns_;
  std::size_t accepted_ = 0;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
  int tokens_issued_ = 0;
};

}  // namespace fakeprovider
