#pragma once
// Precompiled for the backend targets: the heavy headers every adapter includes.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
