// An agent's `fifo`, `feed`, `plan` and `peer/` (spec §2.7, §2.8.5, §2.8.6, §8.11, §8.12).
#include "agent_files.hpp"

#include <algorithm>
#include <ctime>

#include "agent.hpp"
#include "backend/text.hpp"
#include "hub.hpp"
#include "lib9p/utf8.hpp"
#include "olliesrv.hpp"
#include "session.hpp"
#include "verbs.hpp"

namespace ollie {

namespace {

using D = virtfs::Dsl<Ctx>;
using Text = p9::Result<std::string>;

/// Longest plan: it is saved with the session at every persistence moment and re-surfaced into
/// the agent's context (§8.7).
constexpr std::size_t max_plan = 1 << 20;

// ---- fifo (§2.8.5) -----------------------------------------------------------------------------

Text read_fifo(Ctx& c) {
  auto head = c.agent->pop_queued();
  return head ? head->text : std::string();
}

p9::Status write_fifo(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) return st;
  return write_prompt(c.srv->hub(), c.session, c.agent, std::move(text));
}

// ---- feed (§8.12) ------------------------------------------------------------------------------

Text read_feed(Ctx& c) {
  if (auto st = gone(c); !st) return st.error();
  std::lock_guard lock(c.agent->mu);
  return c.agent->feed;
}

// The feed consumer of §8.12, at the write: every new value is submitted, none is missed.
p9::Status write_feed(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) return st;
  text = p9::valid_utf8(text);  // what is read back is what session.json keeps (§1.2)
  Agent& a = *c.agent;
  std::string before;
  {
    std::lock_guard lock(a.mu);
    if (a.feed == text) return {};
    before = std::exchange(a.feed, text);
  }
  if (!a.subagent) {  // a consumer is a persistent agent's (§8.12)
    if (auto st = a.submit({text, "feed"}); !st) {
      // Not delivered (`prompt queue full`): not the current value either, or writing it again
      // would be taken for no change and the value never submitted.
      std::lock_guard lock(a.mu);
      if (a.feed == text) a.feed = std::move(before);
      return st;
    }
  }
  a.feed_signal()->notify();
  return {};
}

// ---- plan (§2.8.6) -----------------------------------------------------------------------------

Text read_plan(Ctx& c) {
  std::lock_guard lock(c.agent->mu);
  return c.agent->plan;
}

p9::Status write_plan(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) return st;
  text = p9::valid_utf8(text);  // what is read back is what session.json keeps (§1.2)
  if (text.size() > max_plan)
    return p9::error("plan too large: " + std::to_string(text.size()) + " bytes (at most " + std::to_string(max_plan) + ")");
  {
    std::lock_guard lock(c.agent->mu);
    if (c.agent->plan == text) return {};
    c.agent->plan = std::move(text);
    c.agent->plan_version++;
    c.agent->plan_changed = std::time(nullptr);
  }
  return {};
}

// ---- peer/ (§8.11) -----------------------------------------------------------------------------

std::vector<std::string> peer_ids(const Agent& a) {
  std::lock_guard lock(a.mu);
  return a.peers;
}

std::vector<std::string> peer_names(Ctx& c) {
  std::vector<std::string> out;
  for (const auto& id : peer_ids(*c.agent))
    if (auto p = c.session->find(id)) out.push_back(p->current_name());
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<virtfs::Instance<Ctx>> peer_lookup(const Ctx& c, const std::string& key) {
  auto p = c.session->find(key);
  if (!p || !c.agent->linked(p->id)) return std::nullopt;
  Ctx child = c;
  child.peer = p;
  return virtfs::Instance<Ctx>{std::move(child), p, p->id};
}

p9::Status write_peer(Ctx& c, std::string text) {
  if (auto st = gone(c); !st) return st;
  Agent& peer = *c.peer;
  {
    std::lock_guard lock(peer.mu);
    if (peer.killed) return p9::error("agent killed");
  }
  if (!c.agent->linked(peer.id)) return p9::error("not a peer: " + peer.current_name());
  const std::string body(backend::trim(text));
  if (body.empty()) return {};
  // The sender is the agent whose peer/ was written, also when the hostowner writes it.
  const std::string from = c.agent->current_name();
  return peer.submit({"<peer-message from=\"" + from + "\">\n" + body + "\n</peer-message>", "peer:" + from});
}

}  // namespace

virtfs::Node<Ctx> fifo_file() {
  using namespace virtfs;
  return D::Leaf("fifo", Mode{0600}, Doc{"the prompt queue: a read pops its head, a write appends a prompt (/verb and !cmd run at once)"},
                 Read(read_fifo), Write(write_fifo));
}

virtfs::Node<Ctx> feed_file() {
  using namespace virtfs;
  return D::Leaf("feed", Mode{0600}, Doc{"one value; a write that changes it submits it; a read waits for a new value (nothing after 5 s)"},
                 BlockOnce(read_feed, [](Ctx& c) { return c.agent->feed_signal(); }), Write(saved(write_feed)));
}

virtfs::Node<Ctx> plan_file() {
  using namespace virtfs;
  return D::Leaf("plan", Mode{0640}, Owner(agent_owner), Doc{"the agent's plan (a markdown checklist); write to replace it"},
                 Read(read_plan), Write(saved(write_plan)),
                 Vers([](const Ctx& c) {
                   std::lock_guard lock(c.agent->mu);
                   return c.agent->plan_version;
                 }),
                 Mtime([](const Ctx& c) {
                   std::lock_guard lock(c.agent->mu);
                   return c.agent->plan_changed;
                 }),
                 Length([](const Ctx& c) -> std::uint64_t {
                   std::lock_guard lock(c.agent->mu);
                   return c.agent->plan.size();
                 }));
}

virtfs::Node<Ctx> peer_dir() {
  using namespace virtfs;
  return D::Dir("peer", Mode{0500}, Owner(agent_owner), Doc{"the linked peers (ctl peeradd), by name"},
                D::TemplateLeaf("{agent}", Mode{0200}, Owner(agent_owner), Doc{"write a message to that peer"}, List(peer_names),
                                Lookup(peer_lookup), Write(write_peer)));
}

}  // namespace ollie
