// fakeprovider [--port N] [--script FILE]: serves the scripted provider on 127.0.0.1 until
// SIGINT or SIGTERM; prints "fakeprovider: listening on http://127.0.0.1:<port>".
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
      port = std::atoi(argv[++i]);
    } else if (a == "--script" && i + 1 < argc) {
      std::ifstream in(argv[++i]);
      script = nlohmann::json::parse(in, nullptr, false);
      if (!in || script.is_discarded()) {
        std::cerr << "fakeprovider: cannot read script " << argv[i] << "\n";
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
