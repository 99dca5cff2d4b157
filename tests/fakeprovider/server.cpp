#include "server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>
#include <stdexcept>

#include "render.hpp"

namespace fakeprovider {

using json = nlohmann::json;

namespace {

bool send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const auto n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Waits `ms` (or until stop); false when the peer closed the connection meanwhile.
bool wait_peer(int fd, int ms, const std::atomic<bool>& stopping) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    if (stopping) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) return true;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long>(left, 50)));
    if (r > 0) {
      char c;
      if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return false;
      if (::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return false;
    }
  }
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 529: return "Overloaded";
    default: return "Status";
  }
}

// `close`: the connection ends after this response (a fault that leaves the body unfinished);
// else it is kept for the client's next request, as the providers' servers do.
std::string head(int status, const std::vector<std::pair<std::string, std::string>>& headers, bool chunked,
                 std::size_t length, bool close = false) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
  bool has_type = false;
  for (const auto& [k, v] : headers) {
    h += k + ": " + v + "\r\n";
    has_type |= lower(k) == "content-type";
  }
  if (!has_type) h += "Content-Type: application/json\r\n";
  h += chunked ? std::string("Transfer-Encoding: chunked\r\n") : "Content-Length: " + std::to_string(length) + "\r\n";
  return h + (close ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n");
}

std::string chunk(std::string_view s) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", s.size());
  return std::string(size) + std::string(s) + "\r\n";
}

std::string credential(const Recorded& r) {
  auto h = [&](const char* k) {
    auto it = r.headers.find(k);
    return it == r.headers.end() ? std::string() : it->second;
  };
  for (const char* k : {"x-api-key", "x-goog-api-key"})
    if (auto v = h(k); !v.empty()) return v;
  auto a = h("authorization");
  if (auto sp = a.find(' '); sp != std::string::npos) return a.substr(sp + 1);
  return a;
}

/// The members `model` and `stream_options` of a request body, the only ones the fake reads: the
/// body's top level is walked, every other member skipped without being built or decoded (the
/// conversation and the tools are most of a request's bytes). nullopt when the walk finds no plain
/// JSON object (or a key with an escape), so the caller parses the whole body instead.
std::optional<json> read_top_level(std::string_view t) {
  std::size_t i = 0;
  const auto ws = [&] {
    while (i < t.size() && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t')) i++;
  };
  const auto string = [&] {  // at its opening quote; false when it does not end
    for (i++; i < t.size();) {  // the next quote not escaped by an odd run of backslashes
      const auto* q = static_cast<const char*>(std::memchr(t.data() + i, '"', t.size() - i));
      if (!q) return false;
      std::size_t at = static_cast<std::size_t>(q - t.data()), run = 0;
      while (at - run > i && t[at - run - 1] == '\\') run++;
      i = at + 1;
      if (run % 2 == 0) return true;
    }
    return false;
  };
  const auto value = [&] {  // up to the ',' or '}' that ends it
    for (int depth = 0; i < t.size();) {
      const char c = t[i];
      if (depth == 0 && (c == ',' || c == '}')) return true;
      if (c == '"') {
        if (!string()) return false;
        continue;
      }
      if (c == '{' || c == '[') depth++;
      if (c == '}' || c == ']') depth--;
      if (depth < 0) return false;
      i++;
    }
    return false;
  };
  json out = json::object();
  ws();
  if (i == t.size() || t[i++] != '{') return std::nullopt;
  ws();
  if (i < t.size() && t[i] == '}') i++;
  else
    for (;;) {
      ws();
      const auto k = i;
      if (i == t.size() || t[i] != '"' || !string()) return std::nullopt;
      const auto key = t.substr(k + 1, i - k - 2);
      if (key.find('\\') != std::string_view::npos) return std::nullopt;
      ws();
      if (i == t.size() || t[i++] != ':') return std::nullopt;
      const auto v = i;
      if (!value()) return std::nullopt;
      if (key == "model" || key == "stream_options") {
        auto parsed = json::parse(t.substr(v, i - v), nullptr, false);
        if (parsed.is_discarded()) return std::nullopt;
        out[std::string(key)] = std::move(parsed);
      }
      if (t[i++] == '}') break;
    }
  ws();
  if (i != t.size()) return std::nullopt;
  return out;
}

}  // namespace

Server::Server(json script, int port) : script_(std::move(script)) {
  if (!script_.is_object()) script_ = json::object();
  models_ = script_.value("models", json::array({{{"id", "fake-model"}, {"context_length", 65536}}}));
  route_faults_ = script_.value("route_faults", json::object());
  for (const auto& r : script_.value("responses", json::array())) queue_.push_back(r);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || ::listen(listen_fd_, 64) < 0) {
    const int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error("fakeprovider: cannot listen on 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(err));
  }
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

Server::~Server() { stop(); }

std::string Server::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

void Server::push(json response) {
  std::lock_guard lk(mu_);
  queue_.push_back(std::move(response));
}

std::vector<Recorded> Server::requests() const {
  std::lock_guard lk(mu_);
  return {requests_.begin(), requests_.end()};
}

void Server::stop() {
  if (stopping_.exchange(true)) return;
  ::shutdown(listen_fd_, SHUT_RDWR);
  {
    std::lock_guard lk(mu_);
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  answered_cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> ts;
  {
    std::lock_guard lk(mu_);
    ts.swap(threads_);
  }
  for (auto& t : ts) t.join();
}

void Server::accept_loop() {
  while (!stopping_) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lk(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    conns_.push_back(fd);
    threads_.emplace_back([this, fd, n = ++accepted_] { serve(fd, n); });
  }
}

json Server::next_response(const std::string& body) {
  std::lock_guard lk(mu_);
  // The first queued response for this request: one with `when` only for a body containing it.
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    const auto when = it->is_object() ? it->value("when", "") : std::string();
    if (!when.empty() && body.find(when) == std::string::npos) continue;
    auto r = std::move(*it);
    queue_.erase(it);
    if (script_.value("loop", false)) queue_.push_back(r);  // it comes round again
    return r;
  }
  return json{{"fault", "no_script"}};  // none left, or only responses for other requests
}

std::size_t Server::answered() const {
  std::lock_guard lk(mu_);
  return answered_;
}

bool Server::wait_answered(std::size_t n, std::chrono::milliseconds limit) {
  std::unique_lock lk(mu_);
  wake_at_ = n;
  return answered_cv_.wait_for(lk, limit, [&] { return answered_ >= n || stopping_; }) && answered_ >= n;
}

void Server::record_closed(std::size_t index) {
  std::lock_guard lk(mu_);
  if (index < requests_.size()) requests_[index].client_closed = true;
}

void Server::serve(int fd, std::size_t connection) {
  std::string buf;
  auto thread_ns = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  };
  for (auto last = thread_ns(); !stopping_ && answer_one(fd, connection, buf);) {
    const auto now = thread_ns();
    cpu_ns_ += now - last;
    last = now;
    std::lock_guard lk(mu_);
    if (++answered_ == wake_at_) answered_cv_.notify_all();
  }
  {
    std::lock_guard lk(mu_);
    std::erase(conns_, fd);
  }
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

bool Server::answer_one(int fd, std::size_t connection, std::string& buf) {
  char tmp[16384];
  std::size_t hend;
  while ((hend = buf.find("\r\n\r\n")) == std::string::npos) {
    const auto n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0 || buf.size() > (1u << 20)) return false;
    buf.append(tmp, static_cast<std::size_t>(n));
  }
  Recorded rec;
  rec.connection = connection;
  {
    const std::string headtext = buf.substr(0, hend);
    const auto first = headtext.find("\r\n");
    const std::string line = headtext.substr(0, first);
    const auto sp1 = line.find(' '), sp2 = line.rfind(' ');
    rec.method = line.substr(0, sp1);
    rec.path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::size_t pos = first == std::string::npos ? headtext.size() : first + 2;
    while (pos < headtext.size()) {
      auto e = headtext.find("\r\n", pos);
      if (e == std::string::npos) e = headtext.size();
      const auto h = headtext.substr(pos, e - pos);
      if (const auto c = h.find(':'); c != std::string::npos) {
        auto v = h.substr(c + 1);
        while (!v.empty() && v.front() == ' ') v.erase(0, 1);
        rec.headers[lower(h.substr(0, c))] = v;
      }
      pos = e + 2;
    }
  }
  std::size_t length = 0;
  if (auto it = rec.headers.find("content-length"); it != rec.headers.end()) length = std::stoul(it->second);
  // The body is read into place, in pieces as large as the socket hands over: a request is most of
  // the fake's time in the round bench (engine-bench rounds), and its bytes were copied three times.
  buf.erase(0, hend + 4);
  if (buf.size() > length) {
    rec.body = buf.substr(0, length);
    buf.erase(0, length);  // the start of a next request
  } else {
    rec.body = std::move(buf);
    buf.clear();
    rec.body.reserve(std::min<std::size_t>(length, 64u << 20));  // one allocation, whatever the header claims
    while (rec.body.size() < length) {
      const std::size_t have = rec.body.size(), want = std::min<std::size_t>(length - have, 256u << 10);
      rec.body.resize(have + want);
      const auto n = ::recv(fd, rec.body.data() + have, want, 0);
      rec.body.resize(have + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
      if (n <= 0) return false;
    }
  }
  bool keep = lower(rec.headers.count("connection") ? rec.headers["connection"] : "") != "close";
  std::size_t index;
  const Recorded* kept;  // in a deque, so it stays where it is while other connections append
  {
    std::lock_guard lk(mu_);
    index = requests_.size();
    requests_.push_back(std::move(rec));
    kept = &requests_.back();
  }
  const std::string& req_body = kept->body;  // never written again, but let go at the end when asked
  struct LetGo {
    Server* s;
    std::size_t index;
    ~LetGo() {
      if (s->keep_bodies_) return;
      std::lock_guard lk(s->mu_);
      std::string().swap(s->requests_[index].body);
    }
  } let_go{this, index};
  const auto header = [&](const std::string& name) {
    const auto it = kept->headers.find(name);
    return it == kept->headers.end() ? std::string() : it->second;
  };

  RequestInfo info;
  info.path = kept->path;
  info.key = credential(*kept);
  if (auto top = read_top_level(req_body)) info.body = std::move(*top);
  else info.body = json::parse(req_body, nullptr, false);
  if (!info.body.is_object()) info.body = json::object();
  info.model = info.body.value("model", "");

  const std::string path = kept->path.substr(0, kept->path.find('?'));
  auto ends = [&](std::string_view s) { return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0; };
  auto reply_json = [&](int status, const json& body) {
    const auto b = body.dump();
    send_all(fd, head(status, {}, false, b.size()) + b);
  };
  const json& models = models_;
  // The answer of a non-chat route, unless the script's route_faults says otherwise.
  const json& route_faults = route_faults_;
  auto answer = [&](const char* route, int status, json body) {
    const std::string fault = route_faults.value(route, "");
    if (fault == "malformed") return reply_json(200, malformed_route_body(route));
    if (fault == "oversized" && body.is_object()) body["padding"] = std::string(12u << 20, 'x');
    if (fault != "stall") return reply_json(status, body);
    // A byte every 100 ms: never idle, never complete.
    keep = false;
    bool alive = send_all(fd, head(200, {}, false, 1u << 20, true) + "{");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (alive && std::chrono::steady_clock::now() < end && (alive = wait_peer(fd, 100, stopping_)))
      alive = send_all(fd, " ");
    if (!alive && !stopping_) record_closed(index);
  };

  Reply reply;
  bool have = false;
  if (kept->method == "GET" && ends("/copilot_internal/v2/token")) {
    const auto accepted = script_.value("github_tokens", json::array());
    const auto auth = header("authorization");
    bool ok = auth.rfind("token ", 0) == 0;
    if (ok && !accepted.empty()) ok = std::find(accepted.begin(), accepted.end(), auth.substr(6)) != accepted.end();
    if (!ok) {
      reply_json(401, {{"message", "Bad credentials"}, {"documentation_url", "https://docs.github.com/rest"}});
    } else {
      int n;
      {
        std::lock_guard lk(mu_);
        n = ++tokens_issued_;
      }
      const auto exp = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count() + 1800;
      answer("token", 200, {{"token", "tid=fake;exp=" + std::to_string(exp) + ";n=" + std::to_string(n)},
                            {"expires_at", exp}, {"refresh_in", 1500}});
    }
  } else if (kept->method == "GET" && path.rfind("/v1beta/models", 0) == 0) {
    json out = json::array();
    for (const auto& m : models)
      out.push_back({{"name", "models/" + m.value("id", "")}, {"inputTokenLimit", m.value("context_length", 0)},
                     {"supportedGenerationMethods", {"generateContent", "streamGenerateContent"}}});
    answer("gemini_models", 200, {{"models", out}});
  } else if (kept->method == "GET" && ends("/models")) {
    json out = json::array();
    for (auto m : models) {
      m["object"] = "model";
      out.push_back(m);
    }
    answer("models", 200, {{"object", "list"}, {"data", out}});
  } else if (kept->method == "GET" && ends("/api/tags")) {
    json out = json::array();
    for (const auto& m : models) out.push_back({{"name", m.value("id", "")}, {"model", m.value("id", "")}, {"size", 1}});
    answer("tags", 200, {{"models", out}});
  } else if (kept->method == "POST" && ends("/api/show")) {
    json found;
    for (const auto& m : models)
      if (m.value("id", "") == info.model) found = m;
    if (found.is_null()) answer("show", 404, {{"error", "model '" + info.model + "' not found"}});
    else answer("show", 200, {{"model_info", {{"general.architecture", "llama"}, {"llama.context_length", found.value("context_length", 0)}}},
                          {"capabilities", {"completion", "tools"}}});
  } else {
    Dialect d;
    have = true;
    if (ends("/chat/completions")) d = Dialect::openai;
    else if (ends("/v1/messages")) d = Dialect::anthropic;
    else if (ends("/api/chat")) d = Dialect::ollama;
    else if (path.find(":streamGenerateContent") != std::string::npos) d = Dialect::gemini;
    else if (ends("/generateAssistantResponse")) d = Dialect::kiro;
    else {
      have = false;
      reply_json(404, {{"error", "fakeprovider: no route for " + kept->method + " " + path}});
    }
    if (have) {
      if (d == Dialect::gemini) {  // the model is in the path
        const auto m0 = path.find("/models/") + 8;
        info.model = path.substr(m0, path.find(':', m0) - m0);
      }
      auto resp = next_response(req_body);
      if (resp.value("fault", "") == "no_script") {
        have = false;
        reply_json(500, {{"error", "fakeprovider: no scripted response left"}});
      } else if (d == Dialect::openai && kept->headers.count("copilot-integration-id") &&
                 header("authorization").rfind("Bearer tid=fake;", 0) != 0) {
        have = false;
        reply_json(401, {{"error", {{"message", "unauthorized: token expired or invalid"}}}});
      } else {
        reply = render(d, resp, info);
      }
    }
  }

  if (have && !reply.streamed) {
    keep = send_all(fd, head(reply.status, reply.headers, false, reply.body.size()) + reply.body) && keep;
  } else if (have) {
    // A response cut off without its last chunk ends its connection: that is how the client learns it.
    const bool unfinished = reply.hang || (reply.drop_after >= 0 && !reply.truncate);
    keep = keep && !unfinished;
    // What is ready goes out in one send: an instant answer is one write, as from a provider whose
    // whole answer is ready; a delay sends what came before it first.
    std::string out = head(reply.status, reply.headers, true, 0, unfinished);
    const auto flush = [&] { return send_all(fd, std::exchange(out, std::string())); };
    bool alive = true;
    if (reply.hang) {
      alive = flush();
      while (alive && !stopping_) alive = wait_peer(fd, 50, stopping_);
      if (!stopping_) record_closed(index);
    } else {
      int n = 0;
      for (const auto& frame : reply.frames) {
        if (reply.drop_after >= 0 && n == reply.drop_after) break;
        if (reply.delay_ms > 0 && !(flush() && wait_peer(fd, reply.delay_ms, stopping_))) {
          alive = false;
          break;
        }
        std::string f = frame;
        if (reply.stamp)
          for (auto p = f.find("@@STAMP@@"); p != std::string::npos; p = f.find("@@STAMP@@"))
            f.replace(p, 9, std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
        out += chunk(f);
        ++n;
      }
      const bool last_chunk = reply.drop_after < 0 || reply.truncate;
      if (alive && reply.endless.empty() && last_chunk) out += "0\r\n\r\n";
      alive = alive && flush();
      for (std::size_t sent = 0; alive && !stopping_ && !reply.endless.empty() && sent < reply.endless_bytes;
           sent += reply.endless.size())
        alive = send_all(fd, chunk(reply.endless));
      if (!alive && !stopping_) record_closed(index);
      if (alive && !reply.endless.empty() && last_chunk) alive = send_all(fd, "0\r\n\r\n");
      keep = keep && alive;
    }
  }
  return keep;
}

}  // namespace fakeprovider
