#pragma once
/// The namespace as data (fsedsl): Dir, Leaf and Template nodes with options for mode, group,
/// owner, Doc and the file kinds Read, Write, Rdwr, BlockOnce and Stream. Generic over the
/// handler context Ctx (what a handler needs to find its object: a session, an agent...);
/// knows nothing of 9P. build() validates the whole declaration before anything is served.
///
///   using D = virtfs::Dsl<Ctx>;
///   auto root = D::Dir("/", virtfs::Mode{0555},
///       D::Leaf("help", virtfs::Mode{0444}, virtfs::Doc{"this text"}, virtfs::Read([](Ctx&) {...})),
///       D::Dir("session", virtfs::Mode{0555},
///           D::Template("{session}", virtfs::List(list_fn), virtfs::Lookup(lookup_fn), ...)));
///
/// A template's Lookup binds an Instance: the child's context and the object it stands for.
/// The object is the instance's identity (its qids), not the name it was reached by.

#include <asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "lib9p/result.hpp"
#include "signal.hpp"
#include "stream.hpp"

namespace virtfs {

/// Who a request acts for (spec §1.6): the hostowner, or an agent principal of group
/// `agent` or `subagent`.
struct Principal {
  std::string uname;
  std::string group;
  bool hostowner = false;
};

template <class Ctx> using ReadFn = std::function<p9::Result<std::string>(Ctx&)>;
template <class Ctx> using WriteFn = std::function<p9::Status(Ctx&, std::string)>;
template <class Ctx> using ReadCoFn = std::function<asio::awaitable<p9::Result<std::string>>(Ctx&)>;
template <class Ctx> using WriteCoFn = std::function<asio::awaitable<p9::Status>(Ctx&, std::string)>;
template <class Ctx> using RdwrFn = std::function<asio::awaitable<p9::Result<std::string>>(Ctx&, std::string)>;
template <class Ctx> using SignalFn = std::function<std::shared_ptr<Signal>(Ctx&)>;
template <class Ctx> using OpenFn = std::function<p9::Result<std::shared_ptr<Cursor>>(Ctx&)>;
template <class Ctx> using ListFn = std::function<std::vector<std::string>(Ctx&)>;
template <class Ctx> using OwnerFn = std::function<std::string(const Ctx&)>;
template <class Ctx> using VersFn = std::function<std::uint32_t(const Ctx&)>;
template <class Ctx> using LengthFn = std::function<std::uint64_t(const Ctx&)>;
template <class Ctx> using MtimeFn = std::function<std::int64_t(const Ctx&)>;
template <class Ctx> using RenameFn = std::function<asio::awaitable<p9::Status>(Ctx&, std::string)>;
template <class Ctx> using NameFn = std::function<std::string(const Ctx&)>;

/// A template instance as Lookup binds it: the context its handlers see, and the object it is
/// (a session, an agent, a process). The object, never the walked name, is the instance's
/// identity (spec §1.5): one object reached by its name and by its id is one instance with one
/// qid, a rename keeps the qid, and a killed and recreated name is a new object with a new one.
/// The adapter holds the object weakly, so its entry goes when the object dies. Never null.
/// `id`, when the object has one that never changes (a session's or an agent's uuid), makes its
/// qids the same in every run of the server (spec §1.5: derived from the immutable ids); without
/// one they are numbered in the order of first walks.
template <class Ctx>
struct Instance {
  Ctx ctx;
  std::shared_ptr<const void> object;
  std::string id;
};
template <class Ctx> using LookupFn = std::function<std::optional<Instance<Ctx>>(const Ctx&, const std::string&)>;

template <class Ctx>
struct Node {
  std::string name;
  bool is_dir = false;
  bool is_template = false;  ///< a directory standing for every name List returns
  std::uint32_t mode = 0;
  std::string gid = "agent";
  OwnerFn<Ctx> owner;        ///< uid; the hostowner when unset
  std::string doc;
  ReadFn<Ctx> read;
  WriteFn<Ctx> write;
  ReadCoFn<Ctx> read_co;     ///< a Read whose content needs waiting (another server's file)
  WriteCoFn<Ctx> write_co;   ///< a Write whose handler needs waiting
  RdwrFn<Ctx> rdwr;
  std::optional<std::string> default_request;  ///< Rdwr request of a read without a write
  ReadFn<Ctx> block_read;
  SignalFn<Ctx> block_signal;
  OpenFn<Ctx> stream;
  bool stream_rdwr = false;
  VersFn<Ctx> vers;          ///< Qid.vers; 0 when unset
  LengthFn<Ctx> length;      ///< the stat Length; 0 when unset
  MtimeFn<Ctx> mtime;        ///< the stat atime and mtime (seconds); the server's start when unset or 0
  ListFn<Ctx> list;
  LookupFn<Ctx> lookup;
  RenameFn<Ctx> rename;     ///< a template directory's wstat of its name
  NameFn<Ctx> current_name;  ///< a renamed template instance's name now (its stat name)
  std::vector<Node> children;

  // Filled in by build().
  std::uint32_t index = 0;
  const Node* parent = nullptr;
  std::string path;

  /// The spelling of spec §2 (`Read+Write`, `StreamRdwr`, `dir`...).
  std::string kind() const {
    if (is_dir) return "dir";
    if (rdwr) return "Rdwr";
    if (stream) return stream_rdwr ? "StreamRdwr" : "Stream";
    const bool r = read || read_co, w = write || write_co;
    if (block_read) return w ? "Write+BlockOnce" : "BlockOnce";
    if (r && w) return "Read+Write";
    return r ? "Read" : "Write";
  }
  const Node* child(const std::string& n) const {
    for (auto& c : children)
      if (!c.is_template && c.name == n) return &c;
    return nullptr;
  }
  const Node* template_child() const {
    for (auto& c : children)
      if (c.is_template) return &c;
    return nullptr;
  }
};

// ---- options ---------------------------------------------------------------------------

struct Mode { std::uint32_t bits; };
struct Group { std::string gid; };
struct Doc { std::string text; };
struct DefaultRequest { std::string text; };
template <class F> struct ReadOpt { F f; };
template <class F> struct WriteOpt { F f; };
template <class F> struct RdwrOpt { F f; };
template <class R, class S> struct BlockOnceOpt { R read; S signal; };
template <class F> struct StreamOpt { F open; bool rdwr; };
template <class F> struct ListOpt { F f; };
template <class F> struct LookupOpt { F f; };
template <class F> struct OwnerOpt { F f; };
template <class F> struct VersOpt { F f; };
template <class F> struct LengthOpt { F f; };
template <class F> struct MtimeOpt { F f; };
template <class F, class N> struct RenameOpt { F f; N current; };

/// Non-blocking content, one snapshot per fid taken at its first read. A handler that returns
/// an awaitable may wait (its first read waits for it; Tflush cancels it).
template <class F> ReadOpt<F> Read(F f) { return {std::move(f)}; }
/// Buffered per fid; the handler runs once, at Tclunk, with everything written. A handler that
/// returns an awaitable may wait (the Rclunk waits for it).
template <class F> WriteOpt<F> Write(F f) { return {std::move(f)}; }
/// An atomic request/response per fid (spec §1.7); the handler is a coroutine.
template <class F> RdwrOpt<F> Rdwr(F f) { return {std::move(f)}; }
/// Change notification of a small value: read gives the value, signal when it may have changed.
template <class R, class S> BlockOnceOpt<R, S> BlockOnce(R read, S signal) { return {std::move(read), std::move(signal)}; }
/// A byte stream, one cursor per fid opened at open.
template <class F> StreamOpt<F> Stream(F open) { return {std::move(open), false}; }
/// A stream whose fid may first receive a request (a filter) before its first read.
template <class F> StreamOpt<F> StreamRdwr(F open) { return {std::move(open), true}; }
/// The names of a Template's instances, in listing order.
template <class F> ListOpt<F> List(F f) { return {std::move(f)}; }
/// The Instance (context and object) a Template's name stands for, or nullopt when none does.
template <class F> LookupOpt<F> Lookup(F f) { return {std::move(f)}; }
/// The uid of a node, from its context (spec §1.6 nodes marked S).
template <class F> OwnerOpt<F> Owner(F f) { return {std::move(f)}; }
/// Qid.vers of a file whose content changes in versions (spec §1.5: log, chat, plan, statewait),
/// in every qid walk, open and stat give.
template <class F> VersOpt<F> Vers(F f) { return {std::move(f)}; }
/// The Length stat gives, for a file whose size is known (spec §1.5: log, log.raw, plan).
template <class F> LengthOpt<F> Length(F f) { return {std::move(f)}; }
/// The time of the last change of a node whose changes are known (spec §1.5: atime/mtime), in
/// seconds since the epoch; 0 while unknown.
template <class F> MtimeOpt<F> Mtime(F f) { return {std::move(f)}; }
/// A template directory renamed by a Twstat that changes only its name, from the hostowner
/// (spec §1.5): the handler gets the new name, exactly as the wstat gives it, and the Rwstat waits
/// for its end (a rename is saved before it is acknowledged). `current` gives the name the
/// instance has now, whatever name or alias a fid was walked by and however it was renamed since:
/// its stat name, and what a wstat's name is compared with.
template <class F, class N> RenameOpt<F, N> Rename(F f, N current) { return {std::move(f), std::move(current)}; }

template <class Ctx> void apply(Node<Ctx>& n, Mode o) { n.mode = o.bits; }
template <class Ctx> void apply(Node<Ctx>& n, Group o) { n.gid = std::move(o.gid); }
template <class Ctx> void apply(Node<Ctx>& n, Doc o) { n.doc = std::move(o.text); }
template <class Ctx> void apply(Node<Ctx>& n, DefaultRequest o) { n.default_request = std::move(o.text); }
template <class Ctx, class F> void apply(Node<Ctx>& n, ReadOpt<F> o) {
  if constexpr (std::is_same_v<std::invoke_result_t<F&, Ctx&>, asio::awaitable<p9::Result<std::string>>>)
    n.read_co = std::move(o.f);
  else
    n.read = std::move(o.f);
}
template <class Ctx, class F> void apply(Node<Ctx>& n, WriteOpt<F> o) {
  if constexpr (std::is_same_v<std::invoke_result_t<F&, Ctx&, std::string>, asio::awaitable<p9::Status>>)
    n.write_co = std::move(o.f);
  else
    n.write = std::move(o.f);
}
template <class Ctx, class F> void apply(Node<Ctx>& n, RdwrOpt<F> o) { n.rdwr = std::move(o.f); }
template <class Ctx, class R, class S> void apply(Node<Ctx>& n, BlockOnceOpt<R, S> o) {
  n.block_read = std::move(o.read);
  n.block_signal = std::move(o.signal);
}
template <class Ctx, class F> void apply(Node<Ctx>& n, StreamOpt<F> o) {
  n.stream = std::move(o.open);
  n.stream_rdwr = o.rdwr;
}
template <class Ctx, class F> void apply(Node<Ctx>& n, ListOpt<F> o) { n.list = std::move(o.f); }
template <class Ctx, class F> void apply(Node<Ctx>& n, LookupOpt<F> o) { n.lookup = std::move(o.f); }
template <class Ctx, class F> void apply(Node<Ctx>& n, OwnerOpt<F> o) { n.owner = std::move(o.f); }
template <class Ctx, class F> void apply(Node<Ctx>& n, VersOpt<F> o) { n.vers = std::move(o.f); }
template <class Ctx, class F> void apply(Node<Ctx>& n, LengthOpt<F> o) { n.length = std::move(o.f); }
template <class Ctx, class F> void apply(Node<Ctx>& n, MtimeOpt<F> o) { n.mtime = std::move(o.f); }
template <class Ctx, class F, class N> void apply(Node<Ctx>& n, RenameOpt<F, N> o) {
  n.rename = std::move(o.f);
  n.current_name = std::move(o.current);
}
template <class Ctx> void apply(Node<Ctx>& n, Node<Ctx> child) { n.children.push_back(std::move(child)); }
/// Several children at once, in order (a part of a tree declared in its own file).
template <class Ctx> void apply(Node<Ctx>& n, std::vector<Node<Ctx>> children) {
  for (auto& c : children) n.children.push_back(std::move(c));
}

/// The node constructors, bound to one context type.
template <class Ctx>
struct Dsl {
  template <class... O>
  static Node<Ctx> Dir(std::string name, O... o) {
    Node<Ctx> n;
    n.name = std::move(name);
    n.is_dir = true;
    (apply(n, std::move(o)), ...);
    return n;
  }
  template <class... O>
  static Node<Ctx> Leaf(std::string name, O... o) {
    Node<Ctx> n;
    n.name = std::move(name);
    (apply(n, std::move(o)), ...);
    return n;
  }
  template <class... O>
  static Node<Ctx> Template(std::string name, O... o) {
    Node<Ctx> n = Dir(std::move(name), std::move(o)...);
    n.is_template = true;
    return n;
  }
  /// A file standing for every name List returns (e.g. `peer/{agent}`).
  template <class... O>
  static Node<Ctx> TemplateLeaf(std::string name, O... o) {
    Node<Ctx> n = Leaf(std::move(name), std::move(o)...);
    n.is_template = true;
    return n;
  }
};

/// A validated declaration. Nodes never move after build, so `const Node*` is a stable identity.
template <class Ctx>
class Tree {
 public:
  const Node<Ctx>& root() const { return *root_; }
  const std::vector<const Node<Ctx>*>& nodes() const { return nodes_; }

  /// `path<TAB>kind<TAB>mode<TAB>doc` for every node in declaration order (spec §2.1 help).
  std::string help() const {
    std::string out;
    char mode[16];
    for (auto* n : nodes_) {
      std::snprintf(mode, sizeof mode, "%04o", n->mode & 07777);
      out += n->path + "\t" + n->kind() + "\t" + mode + "\t" + n->doc + "\n";
    }
    return out;
  }

  template <class C> friend p9::Result<Tree<C>> build(Node<C> root);

 private:
  std::shared_ptr<Node<Ctx>> root_;
  std::vector<const Node<Ctx>*> nodes_;
};

namespace detail {

template <class Ctx>
p9::Status check(Node<Ctx>& n, const Node<Ctx>* parent, std::vector<const Node<Ctx>*>& order) {
  n.parent = parent;
  n.index = static_cast<std::uint32_t>(order.size());
  n.path = !parent ? "/" : (parent->path == "/" ? "/" : parent->path + "/") + n.name;
  order.push_back(&n);
  auto bad = [&](const std::string& why) { return p9::error(n.path + ": " + why); };
  if (parent && (n.name.empty() || n.name == "." || n.name == ".." || n.name.find('/') != std::string::npos))
    return bad("bad name");
  bool handlers = n.read || n.write || n.read_co || n.write_co || n.rdwr || n.block_read || n.stream;
  if (n.rename && !(n.is_template && n.is_dir)) return bad("Rename on a node that is not a template directory");
  if (n.is_dir) {
    if (handlers || n.vers || n.length) return bad("directory with file handlers");
    if (n.is_template && !n.list) return bad("template without List");
    if (n.is_template && !n.lookup) return bad("template without Lookup");
    int templates = 0;
    for (std::size_t i = 0; i < n.children.size(); i++) {
      auto& c = n.children[i];
      if (c.is_template && ++templates > 1) return bad("more than one template");
      for (std::size_t j = 0; j < i; j++)
        if (!c.is_template && n.children[j].name == c.name) return bad("duplicate name " + c.name);
    }
    for (auto& c : n.children)
      if (auto st = check(c, &n, order); !st) return st;
    return {};
  }
  if (!n.children.empty() || (!n.is_template && (n.list || n.lookup))) return bad("file with children");
  if (n.is_template && (!n.list || !n.lookup)) return bad("template without List or Lookup");
  if (!handlers) return bad("file without a handler");
  if (int(bool(n.block_read)) + int(bool(n.stream)) + int(bool(n.rdwr)) > 1) return bad("more than one blocking variant");
  const bool plain = n.read || n.write || n.read_co || n.write_co;
  if (n.rdwr && plain) return bad("Rdwr combined with Read or Write");
  if (n.stream && plain) return bad("Stream combined with Read or Write");
  if (n.read && n.read_co) return bad("two Read handlers");
  if (n.write && n.write_co) return bad("two Write handlers");
  if (n.block_read && n.read_co) return bad("BlockOnce with a waiting Read (its heartbeat cannot wait)");
  if (n.block_read && !n.block_signal) return bad("BlockOnce without a signal");
  if (n.default_request && !n.rdwr) return bad("default request without Rdwr");
  bool reads = n.read || n.read_co || n.rdwr || n.block_read || n.stream;
  bool writes = n.write || n.write_co || n.rdwr || n.stream_rdwr;
  if (reads && !(n.mode & 0444)) return bad(n.kind() + " needs a read permission in its mode");
  if (writes && !(n.mode & 0222)) return bad(n.kind() + " needs a write permission in its mode");
  if (!reads && (n.mode & 0444)) return bad("mode allows reading but nothing serves reads");
  if (!writes && (n.mode & 0222)) return bad("mode allows writing but nothing serves writes");
  return {};
}

}  // namespace detail

/// Validates a declaration; the error names the offending node by its path.
template <class Ctx>
p9::Result<Tree<Ctx>> build(Node<Ctx> root) {
  Tree<Ctx> t;
  t.root_ = std::make_shared<Node<Ctx>>(std::move(root));
  if (!t.root_->is_dir) return p9::error("/: the root must be a directory");
  if (auto st = detail::check(*t.root_, static_cast<const Node<Ctx>*>(nullptr), t.nodes_); !st) return st.error();
  return t;
}

}  // namespace virtfs
