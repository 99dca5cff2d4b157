#pragma once
/// Prices and the cost rules of spec §8.14.

#include <optional>
#include <string_view>

#include "backend/types.hpp"

namespace ollie::backend {

/// USD per million tokens.
struct Price {
  double in = 0;
  double out = 0;
};

/// The table price of `model`: matched case-insensitively after the last '/', longest prefix
/// wins. nullopt for unknown and local models (which cost 0).
std::optional<Price> price_of(std::string_view model);

/// The cost of one response in USD: the provider's own cost when it reported one, else the
/// table (cached input at 10% for claude models, 50% otherwise; cache creation at 125%).
double cost_of(std::string_view model, const Usage& usage);

}  // namespace ollie::backend
