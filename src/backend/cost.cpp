#include "backend/cost.hpp"

#include <array>

#include "backend/text.hpp"

namespace ollie::backend {

namespace {

struct Row {
  std::string_view prefix;
  Price price;
};

// Spec §8.14 seed table (USD per million tokens, input / output).
constexpr std::array<Row, 20> table{{
    {"claude-opus-4", {15.00, 75.00}},     {"claude-sonnet-4", {3.00, 15.00}},
    {"claude-haiku-4", {0.80, 4.00}},      {"claude-3-opus", {15.00, 75.00}},
    {"claude-3-5-sonnet", {3.00, 15.00}},  {"claude-3-5-haiku", {0.80, 4.00}},
    {"claude-3-sonnet", {3.00, 15.00}},    {"claude-3-haiku", {0.25, 1.25}},
    {"gpt-4o-mini", {0.15, 0.60}},         {"gpt-4o", {2.50, 10.00}},
    {"gpt-4-turbo", {10.00, 30.00}},       {"o1-mini", {3.00, 12.00}},
    {"o3-mini", {1.10, 4.40}},             {"o1", {15.00, 60.00}},
    {"o3", {10.00, 40.00}},                {"gemini-2.5-pro", {1.25, 10.00}},
    {"gemini-2.5-flash", {0.15, 0.60}},    {"gemini-2.0-flash", {0.10, 0.40}},
    {"gemini-1.5-pro", {1.25, 5.00}},      {"gemini-1.5-flash", {0.075, 0.30}},
}};

std::string_view base_name(std::string_view model) {
  const auto slash = model.rfind('/');
  return slash == std::string_view::npos ? model : model.substr(slash + 1);
}

}  // namespace

std::optional<Price> price_of(std::string_view model) {
  const auto name = base_name(model);
  const Row* best = nullptr;
  for (const auto& r : table)
    if (istarts_with(name, r.prefix) && (!best || r.prefix.size() > best->prefix.size())) best = &r;
  if (!best) return std::nullopt;
  return best->price;
}

double cost_of(std::string_view model, const Usage& u) {
  if (u.cost) return *u.cost;
  const auto p = price_of(model);
  if (!p) return 0;
  const double r = istarts_with(base_name(model), "claude") ? 0.10 : 0.50;
  return (static_cast<double>(u.input) * p->in + static_cast<double>(u.output) * p->out +
          static_cast<double>(u.cached_input) * p->in * r +
          static_cast<double>(u.cache_creation) * p->in * 1.25) /
         1e6;
}

}  // namespace ollie::backend
