#pragma once
/// Files of an agent's directory (spec §2.7): `fifo`, `feed`, `plan`, `peer/` (agent_files.cpp)
/// and `proc/` (proc_files.cpp), each a node of the declaration in namespace.cpp.

#include "namespace.hpp"

namespace ollie {

/// `fifo` (§2.8.5): a read pops the head of the prompt queue at the fid's first read (nothing
/// when it is empty); a write is a `prompt` write (§2.8.4: `/verb`, `!cmd` and `//` included).
virtfs::Node<Ctx> fifo_file();
/// `feed` (§8.12), Write+BlockOnce: a write replaces the value and, when it differs, submits it
/// (`user` block `feed`); a read waits for a value other than the fid's last, 0 bytes after 5 s.
virtfs::Node<Ctx> feed_file();
/// `plan` (§2.8.6): the plan exactly as last written; a write replaces it (persisted).
virtfs::Node<Ctx> plan_file();
/// `peer/` and `peer/{agent}` (§8.11): the linked peers by name; a write delivers
/// `<peer-message from="<this agent>">` to that peer.
virtfs::Node<Ctx> peer_dir();
/// `proc/` and `proc/{pid}/{out,wait,stat,ctl}` (§2.7, §6.5.3): the agent's background
/// processes, mirrored from toolsrv.
virtfs::Node<Ctx> proc_dir();

}  // namespace ollie
