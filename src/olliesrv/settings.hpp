#pragma once
/// A new agent's settings (spec §4.3) and the `cfg` file (§2.8.3).

#include <optional>
#include <string>
#include <vector>

#include "backend/config.hpp"
#include "backend/types.hpp"
#include "lib9p/result.hpp"
#include "profile.hpp"

namespace ollie {

/// The inputs of §4.3's table; empty strings are "not given".
struct SettingsInput {
  std::string backend, model;              ///< agent/new `backend=`, `model=`
  const Profile* profile = nullptr;        ///< the resolved profile (never null)
  std::string parent_backend, parent_model;  ///< with `parent=`
  std::string session_backend, session_model;
};

struct BackendChoice {
  std::string backend, model;
};

/// Backend and model by §4.3. No backend anywhere →
/// `no backend configured: set backend in backends.conf or OLLIE_BACKEND`; an unknown one →
/// `unknown backend: <b> (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)`.
/// The model falls back to backends.conf `[<backend>] model`, OLLIE_MODEL, then the backend's
/// built-in default (backend::resolve_backend's).
p9::Result<BackendChoice> resolve_backend_choice(const SettingsInput& in, const backend::BackendsConf& conf,
                                                 const p9::Env& env);

/// "" or a supported backend; else unknown_backend(name).
p9::Status check_backend(const std::string& name);
/// The longest model name taken (the longest a provider lists is under 100 bytes).
inline constexpr std::size_t max_model = 256;
/// "" or a model name that fits a table field; else `invalid model: <m>` (a control character)
/// or `invalid model: longer than 256 bytes`.
p9::Status check_model(const std::string& name);
/// `unknown backend: <b> (ollama, openai, …)`.
p9::Error unknown_backend(const std::string& name);

/// The cfg generation-parameter keys, in cfg order: maxTokens ... verbosity.
const std::vector<std::string>& param_keys();
/// Validates a cfg value of a parameter key into JSON text (number, bool, array of strings):
/// `invalid temperature: abc`, `invalid reasoningEffort: x (low, medium, high)`.
p9::Result<std::string> parse_param(const std::string& key, const std::string& value);
/// The effective parameters: the profile's (JSON object text) overlaid with the overrides.
std::string merge_params(const std::string& profile_params, const std::string& overrides);
/// JSON object text of parameters → the backend's GenerationParams.
backend::GenerationParams to_generation_params(const std::string& params);

/// The text `cfg` reads (§2.8.3): every key in order, unset values empty.
struct CfgView {
  std::string backend, model, profile, cwd_override;
  std::string params = "{}";  ///< effective parameters (JSON object text)
};
std::string render_cfg(const CfgView& v);

/// One `cfg` write, parsed and validated (all or nothing), in the application order of §2.8.3:
/// agent, backend, model, cwd, then parameters. Unset (`key=`) is an empty value.
struct CfgWrite {
  std::optional<std::string> profile, backend, model, cwd;
  std::vector<std::pair<std::string, std::optional<std::string>>> params;  ///< key → JSON text, nullopt = drop
};
/// Tokens as in §1.3: `bad token: <t>`, `unknown key: <k>`, `duplicate key: <k>`,
/// `unterminated quote`, and parse_param's errors.
p9::Result<CfgWrite> parse_cfg_write(const std::string& request);

}  // namespace ollie
