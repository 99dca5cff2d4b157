#pragma once
/// Creating, killing and restoring sessions and agents (spec §4.1, §4.2 persistent mode, §3.2
/// kill, §3.3 kill, §7.7 restore, §8.1.1).

#include <asio/awaitable.hpp>
#include <memory>
#include <string>

#include "lib9p/result.hpp"
#include "virtfs/dsl.hpp"

namespace ollie {

struct Hub;
class Session;
class Agent;

/// `session/new`: the reply is the id and a newline.
asio::awaitable<p9::Result<std::string>> new_session(Hub& hub, std::string request);
/// `agent/new` of a session.
asio::awaitable<p9::Result<std::string>> new_agent(Hub& hub, std::shared_ptr<Session> s, virtfs::Principal who,
                                                   std::string request);
/// A `goal` write and the workflow it starts (§8.13): the agent `conductor` (created with the
/// profile `conductor` when the session has none), then `text` stored and persisted, then
/// submitted to it. One goal write at a time per session: concurrent ones share one conductor,
/// and the goal stored is the last one submitted; a write that fails stores nothing.
asio::awaitable<p9::Status> submit_goal(Hub& hub, std::shared_ptr<Session> s, std::string text);
/// Session `ctl kill`: the files go on the blocking pool, before the event.
asio::awaitable<void> kill_session(Hub& hub, std::shared_ptr<Session> s);
/// Agent `ctl kill`.
asio::awaitable<void> kill_agent(Hub& hub, std::shared_ptr<Session> s, std::shared_ptr<Agent> a);
/// session.json written on the blocking pool, and waited for: the moments of §7.7 a client's
/// request makes reply only once the change is on disk, so kill -9 after a reply loses nothing
/// it acknowledged. An error is logged (Session::save) and returned as `save: <reason>`.
asio::awaitable<p9::Status> save_now(Hub& hub, std::shared_ptr<Session> s);
/// save_now after a change that stays made when the save fails (a ctl verb, a cfg or name
/// write): its error says so, `save: <reason> (the change is made, not saved)`, since an error
/// otherwise tells a client that nothing changed.
asio::awaitable<p9::Status> save_change(Hub& hub, std::shared_ptr<Session> s);
/// Every persisted session, without starting any toolsrv. Returns the number restored.
std::size_t restore(Hub& hub);
/// Shutdown: interrupt every turn, wait (at most 2 s) for the interrupts to end, save every
/// session, stop every toolsrv. Blocks: on hub.blocking, never on an I/O thread.
void stop_all(Hub& hub);

}  // namespace ollie
