// shell: runs `cmd` with /bin/bash -c in the call's cwd, stdin /dev/null, after the safety
// check of OP-35 (checks.hpp) and its rate limit (limit.hpp). The process becomes bash (exec):
// its stdout and stderr are the tool's, its exit status the tool's, so the engine reports a
// failure as `error: exit status <n>` with stderr after `[stderr]` (§8.3.4), and toolsrv's
// timeout and cancellation reach the whole command.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "checks.hpp"
#include "limit.hpp"
#include "tool.hpp"

namespace {

// One argument string of execve may hold at most MAX_ARG_STRLEN (32 pages) bytes.
constexpr std::size_t max_command = 128 * 1024 - 1;

std::string minutes(std::time_t seconds) {
  return seconds >= 60 ? std::to_string(seconds / 60) + "m" + std::to_string(seconds % 60) + "s" : std::to_string(seconds) + "s";
}

// The command to run, or an Error saying why not.
std::string admit(const tool::Args& args) {
  std::string command = args.string("cmd");
  (void)args.opt_string("description");  // for people watching; must be a string
  if (command.find_first_not_of(" \t\r\n") == std::string::npos) throw tool::Error("invalid command: empty");
  if (command.find('\0') != std::string::npos) throw tool::Error("invalid command: contains a NUL character");
  if (command.size() > max_command)
    throw tool::Error("invalid command: longer than 128 KiB; write a script file and run that instead");
  shell::Limit limit;
  const std::time_t now = std::time(nullptr);
  if (const auto left = limit.blocked_for(now))
    throw tool::Error("refused: shell is blocked for " + minutes(left) + " more after " + std::to_string(shell::max_refusals) +
                      " refused commands within a minute; use other tools or ask the user");
  const char* home = std::getenv("HOME");
  if (auto why = shell::refusal(command, home ? home : "")) {
    std::string text = "refused: " + *why + "; nothing was run";
    if (limit.refused(now))
      text += "; " + std::to_string(shell::max_refusals) + " refusals within a minute: shell is blocked for " +
              minutes(shell::block_time);
    else
      text += "; do it another way, or ask the user to run it";
    throw tool::Error(text);
  }
  return command;
}

}  // namespace

int main() {
  std::string command;
  try {
    command = admit(tool::Args::from_stdin());
  } catch (const std::exception& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || ::dup2(null, 0) < 0) {
    std::printf("cannot open /dev/null: %s\n", std::strerror(errno));
    return 1;
  }
  std::fflush(stdout);
  ::execl("/bin/bash", "bash", "-c", command.c_str(), static_cast<char*>(nullptr));
  std::printf("cannot run /bin/bash: %s\n", std::strerror(errno));
  return 1;
}
