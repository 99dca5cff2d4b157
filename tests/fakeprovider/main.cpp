// fakeprovider [--port N] [--script FILE]: serves the scripted provider on 127.0.0.1 until
// SIGINT or SIGTERM; prints "fakeprovider: listening on http://127.0.0.1:<port>".
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "server.hpp"

int main(int argc, char** argv) {
  int port = 0;
  nlohmann::json script = nlohmann::json::object();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) {
      const std::string_view v = argv[++i];
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), port);
      if (ec != std::errc() || end != v.data() + v.size() || port < 0 || port > 65535) {
        std::cerr << "fakeprovider: --port takes 0 to 65535, not " << v << "\n";
        return 2;
      }
    } else if (a == "--script" && i + 1 < argc) {
      std::ifstream in(argv[++i]);
      if (!in) {
        std::cerr << "fakeprovider: cannot read script " << argv[i] << "\n";
        return 2;
      }
      script = nlohmann::json::parse(in, nullptr, false);
      if (script.is_discarded()) {
        std::cerr << "fakeprovider: script " << argv[i] << " is not valid JSON\n";
        return 2;
      }
    } else {
      std::cerr << "usage: fakeprovider [--port N] [--script FILE]\n";
      return 2;
    }
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  try {
    fakeprovider::Server server(script, port);
    std::cout << "fakeprovider: listening on " << server.url() << std::endl;
    int sig = 0;
    sigwait(&set, &sig);
    server.stop();
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
