#pragma once
/// Changing an agent's settings (spec §2.8.3, §3.3, §8.1.4): the profile switch, backend and
/// model, the cwd override and the generation parameters, validated and applied all or nothing;
/// shared by the agent ctl verbs and the `cfg` file. Also the agent rename (§2.7).

#include <asio/awaitable.hpp>
#include <memory>
#include <optional>
#include <string>

#include "lib9p/result.hpp"
#include "profile.hpp"
#include "settings.hpp"

namespace ollie {

struct Hub;
class Session;
class Agent;

/// What one change sets; unset members are left alone.
struct SettingsChange {
  std::optional<Profile> profile;       ///< switch to it (§8.1.4): tools, prompts, history
  std::optional<BackendChoice> target;  ///< backend and model ("" = the backend's default)
  std::optional<std::string> cwd;       ///< the override, absolute ("" = inherit the session's)
  std::optional<std::string> overrides; ///< the cfg parameter overrides (JSON object text)
};

/// Builds the backend and checks the cwd on the tool host first (their errors change nothing),
/// then applies everything and saves. The caller holds the agent (Agent::hold).
asio::awaitable<p9::Status> apply_change(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a,
                                         SettingsChange c);

/// The profile `name`, read on the hub's blocking pool: `unknown agent profile: <p>`,
/// `agent profile <p>: <parse error>`.
asio::awaitable<p9::Result<Profile>> read_profile(Hub& hub, std::string name);

/// The tools of profile `p` for an agent that has none (creation, switch; §7.5): its autoLoad
/// loaded one toolsrv `load` each (a name that cannot be loaded is an `info` warning; one that
/// could not be loaded for want of a toolsrv is still wanted and loaded at its next start), then
/// the profile's warnings as `info` blocks.
asio::awaitable<void> load_profile_tools(std::shared_ptr<Session> s, std::shared_ptr<Agent> a, const Profile& p);

/// A profile switch to `p` (§8.1.4): the profile's backend/model when it names them, the cfg
/// parameter overrides dropped.
SettingsChange profile_switch(const Agent& a, Profile p);

/// A cwd argument made absolute (`~` expanded, trailing `/` removed), "" when it is the session
/// cwd: `cwd must be absolute: <d>`, `cwd: invalid character`.
p9::Result<std::string> cwd_argument(Hub& hub, const Session& s, const std::string& given);

/// A `cfg` write (§2.8.3): key=value tokens applied in the order agent, backend, model, cwd,
/// parameters; `cannot change cfg while agent is running` unless idle.
asio::awaitable<p9::Status> write_cfg(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a,
                                      std::string request);

/// Renames the agent (its `name` file, wstat, ctl `name`): `invalid name: <n>`,
/// `agent already exists: <n>`; event `agent.<id>.rename`; the system prompt renders again.
p9::Status set_agent_name(Hub& hub, const std::shared_ptr<Session>& s, const std::shared_ptr<Agent>& a,
                          const std::string& name);

/// Agent::hold() for a scope: `ok` is false when the agent runs a turn.
class Hold {
 public:
  explicit Hold(Agent& a, bool stoppable = false);
  ~Hold();
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  const bool ok;

 private:
  Agent& a_;
};

}  // namespace ollie
