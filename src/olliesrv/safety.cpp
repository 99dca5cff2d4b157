#include "safety.hpp"

namespace ollie {

std::string plan_reminder(const std::string& plan) {
  constexpr const char* blank = " \t\r\n";
  const auto first = plan.find_first_not_of(blank);
  if (first == std::string::npos) return "";
  // Leading blank lines go; the first line's indentation stays.
  const auto line = plan.find_last_of('\n', first);
  const auto from = line == std::string::npos ? 0 : line + 1;
  const auto last = plan.find_last_not_of(blank);
  return "[system: your current plan:\n\n" + plan.substr(from, last + 1 - from) +
         "\n\nKeep it current: tick finished steps and revise it if your approach changed. Continue.]";
}

}  // namespace ollie
