#include "codec.hpp"

#include <cstring>
#include <limits>
#include <string_view>

#include "errors.hpp"

namespace p9 {

namespace {

constexpr std::size_t QIDSZ = 13;
constexpr std::size_t HDR = 7;  // size[4] type[1] tag[2]

std::size_t str_size(const std::string& s) { return 2 + s.size(); }

// ---- encoding -------------------------------------------------------------

struct Put {
  std::vector<std::uint8_t>& out;
  void u8(std::uint8_t v) { out.push_back(v); }
  void u16(std::uint16_t v) { u8(v & 0xff); u8(v >> 8); }
  void u32(std::uint32_t v) { u16(v & 0xffff); u16(v >> 16); }
  void u64(std::uint64_t v) { u32(v & 0xffffffff); u32(v >> 32); }
  void bytes(std::string_view s) { out.insert(out.end(), s.begin(), s.end()); }
  void str(const std::string& s) { u16(static_cast<std::uint16_t>(s.size())); bytes(s); }
  void qid(const Qid& q) { u8(q.type); u32(q.vers); u64(q.path); }
};

// ---- decoding ---------------------------------------------------------------

// A cursor over one frame. Every read checks the bounds; the first overrun sets `bad`
// and every later read returns zeros, so a decoder can read straight through and check once.
struct Get {
  std::span<const std::uint8_t> buf;
  std::size_t pos = 0;
  const char* bad = nullptr;

  bool need(std::size_t n, const char* why) {
    if (bad) return false;
    if (buf.size() - pos < n) { bad = why; return false; }
    return true;
  }
  std::uint8_t u8() { return need(1, "truncated message") ? buf[pos++] : 0; }
  std::uint16_t u16() {
    if (!need(2, "truncated message")) return 0;
    std::uint16_t v = buf[pos] | (buf[pos + 1] << 8);
    pos += 2;
    return v;
  }
  std::uint32_t u32() { std::uint32_t lo = u16(); return lo | (std::uint32_t(u16()) << 16); }
  std::uint64_t u64() { std::uint64_t lo = u32(); return lo | (std::uint64_t(u32()) << 32); }
  std::string bytes(std::size_t n, const char* why) {
    if (!need(n, why)) return {};
    std::string s(reinterpret_cast<const char*>(buf.data() + pos), n);
    pos += n;
    return s;
  }
  std::string str() {
    std::size_t n = u16();
    std::string s = bytes(n, "string longer than message");
    if (!bad && std::memchr(s.data(), 0, s.size())) bad = "nul in string";
    return s;
  }
  Qid qid() { Qid q; q.type = u8(); q.vers = u32(); q.path = u64(); return q; }
};

Dir get_dir(Get& g) {
  Dir d;
  std::size_t start = g.pos;
  std::uint16_t size = g.u16();
  if (!g.bad && (size + 2u < STATFIXLEN || g.buf.size() - start < size + 2u)) {
    g.bad = "bad stat entry size";
    return d;
  }
  d.type = g.u16();
  d.dev = g.u32();
  d.qid = g.qid();
  d.mode = g.u32();
  d.atime = g.u32();
  d.mtime = g.u32();
  d.length = g.u64();
  d.name = g.str();
  d.uid = g.str();
  d.gid = g.str();
  d.muid = g.str();
  if (!g.bad && g.pos - start != size + 2u) g.bad = "bad stat entry size";
  return d;
}

}  // namespace

Dir Dir::null() {
  Dir d;
  d.type = 0xFFFF;
  d.dev = 0xFFFFFFFF;
  d.qid = Qid{0xFF, 0xFFFFFFFF, ~std::uint64_t{0}};
  d.mode = d.atime = d.mtime = 0xFFFFFFFF;
  d.length = ~std::uint64_t{0};
  return d;
}

const char* type_name(std::uint8_t t) {
  static const char* names[] = {"Tversion", "Rversion", "Tauth", "Rauth", "Tattach", "Rattach",
                                "Terror", "Rerror", "Tflush", "Rflush", "Twalk", "Rwalk",
                                "Topen", "Ropen", "Tcreate", "Rcreate", "Tread", "Rread",
                                "Twrite", "Rwrite", "Tclunk", "Rclunk", "Tremove", "Rremove",
                                "Tstat", "Rstat", "Twstat", "Rwstat"};
  if (t < Tversion || t > Rwstat) return "unknown";
  return names[t - Tversion];
}

std::size_t dir_size(const Dir& d) {
  return STATFIXLEN + d.name.size() + d.uid.size() + d.gid.size() + d.muid.size();
}

namespace {

bool dir_fits(const Dir& d) { return dir_size(d) - 2 <= MAXSTRING; }  // every string fits, then

void put_dir(Put& p, const Dir& d) {
  p.u16(static_cast<std::uint16_t>(dir_size(d) - 2));
  p.u16(d.type);
  p.u32(d.dev);
  p.qid(d.qid);
  p.u32(d.mode);
  p.u32(d.atime);
  p.u32(d.mtime);
  p.u64(d.length);
  p.str(d.name);
  p.str(d.uid);
  p.str(d.gid);
  p.str(d.muid);
}

}  // namespace

Status encode_dir(const Dir& d, std::vector<std::uint8_t>& out) {
  if (!dir_fits(d)) return error(err::stat_too_long);
  Put p{out};
  put_dir(p, d);
  return {};
}

Result<std::vector<std::uint8_t>> encode_dir(const Dir& d) {
  std::vector<std::uint8_t> out;
  out.reserve(dir_size(d));
  if (auto st = encode_dir(d, out); !st) return st.error();
  return out;
}

Result<Dir> decode_dir(std::span<const std::uint8_t> buf) {
  Get g{buf};
  Dir d = get_dir(g);
  if (g.bad) return error(g.bad);
  if (g.pos != buf.size()) return error("bad stat entry size");
  return d;
}

Result<std::vector<Dir>> decode_dirs(std::span<const std::uint8_t> buf) {
  Get g{buf};
  std::vector<Dir> dirs;
  while (g.pos < buf.size()) {
    dirs.push_back(get_dir(g));
    if (g.bad) return error(g.bad);
  }
  return dirs;
}

std::size_t encoded_size(const Fcall& f) {
  std::size_t n = HDR;
  switch (f.type) {
    case Tversion: case Rversion: return n + 4 + str_size(f.version);
    case Tauth: return n + 4 + str_size(f.uname) + str_size(f.aname);
    case Rauth: return n + QIDSZ;
    case Tattach: return n + 8 + str_size(f.uname) + str_size(f.aname);
    case Rattach: return n + QIDSZ;
    case Rerror: return n + str_size(f.ename);
    case Tflush: return n + 2;
    case Rflush: return n;
    case Twalk:
      n += 10;
      for (auto& w : f.wname) n += str_size(w);
      return n;
    case Rwalk: return n + 2 + QIDSZ * f.wqid.size();
    case Topen: return n + 5;
    case Ropen: case Rcreate: return n + QIDSZ + 4;
    case Tcreate: return n + 4 + str_size(f.name) + 5;
    case Tread: return n + 16;
    case Rread: return n + 4 + f.data.size();
    case Twrite: return n + 16 + f.data.size();
    case Rwrite: return n + 4;
    case Tclunk: case Tremove: case Tstat: return n + 4;
    case Rclunk: case Rremove: case Rwstat: return n;
    case Rstat: return n + 2 + f.stat.size();
    case Twstat: return n + 4 + 2 + f.stat.size();
  }
  return 0;
}

namespace {

bool str_fits(const std::string& s) { return s.size() <= MAXSTRING; }

// The strings each message carries (the ones whose 16-bit length could wrap).
bool strings_fit(const Fcall& f) {
  switch (f.type) {
    case Tversion: case Rversion: return str_fits(f.version);
    case Tauth: case Tattach: return str_fits(f.uname) && str_fits(f.aname);
    case Rerror: return str_fits(f.ename);
    case Tcreate: return str_fits(f.name);
    case Twalk:
      for (auto& w : f.wname)
        if (!str_fits(w)) return false;
      return true;
  }
  return true;
}

}  // namespace

Status encodable(const Fcall& f) {
  if (!strings_fit(f)) return error(err::string_too_long);
  if ((f.type == Rstat || f.type == Twstat) && f.stat.size() > MAXSTRING) return error(err::stat_too_long);
  constexpr std::size_t max16 = std::numeric_limits<std::uint16_t>::max();
  if ((f.type == Twalk && f.wname.size() > max16) || (f.type == Rwalk && f.wqid.size() > max16))
    return error(err::too_many_walk_names);
  if (encoded_size(f) > std::numeric_limits<std::uint32_t>::max()) return error(err::message_too_long);
  return {};
}

Status encode(const Fcall& f, std::vector<std::uint8_t>& out) {
  if (auto st = encodable(f); !st) return st;
  Put p{out};
  p.u32(static_cast<std::uint32_t>(encoded_size(f)));
  p.u8(f.type);
  p.u16(f.tag);
  switch (f.type) {
    case Tversion: case Rversion: p.u32(f.msize); p.str(f.version); break;
    case Tauth: p.u32(f.afid); p.str(f.uname); p.str(f.aname); break;
    case Rauth: p.qid(f.aqid); break;
    case Tattach: p.u32(f.fid); p.u32(f.afid); p.str(f.uname); p.str(f.aname); break;
    case Rattach: p.qid(f.qid); break;
    case Rerror: p.str(f.ename); break;
    case Tflush: p.u16(f.oldtag); break;
    case Twalk:
      p.u32(f.fid);
      p.u32(f.newfid);
      p.u16(static_cast<std::uint16_t>(f.wname.size()));
      for (auto& w : f.wname) p.str(w);
      break;
    case Rwalk:
      p.u16(static_cast<std::uint16_t>(f.wqid.size()));
      for (auto& q : f.wqid) p.qid(q);
      break;
    case Topen: p.u32(f.fid); p.u8(f.mode); break;
    case Ropen: case Rcreate: p.qid(f.qid); p.u32(f.iounit); break;
    case Tcreate: p.u32(f.fid); p.str(f.name); p.u32(f.perm); p.u8(f.mode); break;
    case Tread: p.u32(f.fid); p.u64(f.offset); p.u32(f.count); break;
    case Rread: p.u32(static_cast<std::uint32_t>(f.data.size())); p.bytes(f.data); break;
    case Twrite:
      p.u32(f.fid);
      p.u64(f.offset);
      p.u32(static_cast<std::uint32_t>(f.data.size()));
      p.bytes(f.data);
      break;
    case Rwrite: p.u32(f.count); break;
    case Tclunk: case Tremove: case Tstat: p.u32(f.fid); break;
    case Rstat:
      p.u16(static_cast<std::uint16_t>(f.stat.size()));
      out.insert(out.end(), f.stat.begin(), f.stat.end());
      break;
    case Twstat:
      p.u32(f.fid);
      p.u16(static_cast<std::uint16_t>(f.stat.size()));
      out.insert(out.end(), f.stat.begin(), f.stat.end());
      break;
    default: break;
  }
  return {};
}

Result<std::vector<std::uint8_t>> encode(const Fcall& f) {
  std::vector<std::uint8_t> out;
  out.reserve(encoded_size(f));
  if (auto st = encode(f, out); !st) return st.error();
  return out;
}

Framing frame_at(std::span<const std::uint8_t> unread, std::uint32_t msize) {
  if (unread.size() < 4) return {Framing::More, 0};
  std::uint32_t size = unread[0] | unread[1] << 8 | unread[2] << 16 | std::uint32_t(unread[3]) << 24;
  if (size < HDR || size > MAX_FRAME) return {Framing::Bad, size};
  if (size > msize) return unread.size() < HDR ? Framing{Framing::More, HDR} : Framing{Framing::Oversize, size};
  if (unread.size() < size) return {Framing::More, size};
  return {Framing::Whole, size};
}

std::uint16_t tag_of(std::span<const std::uint8_t> frame) {
  if (frame.size() < HDR) return NOTAG;
  return frame[5] | (frame[6] << 8);
}

Result<Fcall> decode(std::span<const std::uint8_t> frame) {
  Get g{frame};
  Fcall f;
  std::uint32_t size = g.u32();
  f.type = g.u8();
  f.tag = g.u16();
  if (g.bad) return error("truncated message");
  if (size != frame.size()) return error("size mismatch");
  switch (f.type) {
    case Tversion: case Rversion: f.msize = g.u32(); f.version = g.str(); break;
    case Tauth: f.afid = g.u32(); f.uname = g.str(); f.aname = g.str(); break;
    case Rauth: f.aqid = g.qid(); break;
    case Tattach: f.fid = g.u32(); f.afid = g.u32(); f.uname = g.str(); f.aname = g.str(); break;
    case Rattach: f.qid = g.qid(); break;
    case Rerror: f.ename = g.str(); break;
    case Tflush: f.oldtag = g.u16(); break;
    case Rflush: break;
    case Twalk: {
      f.fid = g.u32();
      f.newfid = g.u32();
      std::uint16_t n = g.u16();
      if (!g.bad && n > MAXWELEM) return error("too many walk elements");
      for (std::uint16_t i = 0; i < n && !g.bad; i++) f.wname.push_back(g.str());
      break;
    }
    case Rwalk: {
      std::uint16_t n = g.u16();
      if (!g.bad && n > MAXWELEM) return error("too many walk elements");
      for (std::uint16_t i = 0; i < n && !g.bad; i++) f.wqid.push_back(g.qid());
      break;
    }
    case Topen: f.fid = g.u32(); f.mode = g.u8(); break;
    case Ropen: case Rcreate: f.qid = g.qid(); f.iounit = g.u32(); break;
    case Tcreate: f.fid = g.u32(); f.name = g.str(); f.perm = g.u32(); f.mode = g.u8(); break;
    case Tread: f.fid = g.u32(); f.offset = g.u64(); f.count = g.u32(); break;
    case Rread: { std::uint32_t n = g.u32(); f.data = g.bytes(n, "count longer than message"); break; }
    case Twrite: {
      f.fid = g.u32();
      f.offset = g.u64();
      std::uint32_t n = g.u32();
      f.data = g.bytes(n, "count longer than message");
      break;
    }
    case Rwrite: f.count = g.u32(); break;
    case Tclunk: case Tremove: case Tstat: f.fid = g.u32(); break;
    case Rclunk: case Rremove: case Rwstat: break;
    case Rstat: case Twstat: {
      if (f.type == Twstat) f.fid = g.u32();
      std::uint16_t n = g.u16();
      std::string s = g.bytes(n, "stat longer than message");
      if (g.bad) break;
      f.stat.assign(s.begin(), s.end());
      auto d = decode_dir(f.stat);
      if (!d) return error(d.ename());
      break;
    }
    default: return error("unknown message type " + std::to_string(f.type));
  }
  if (g.bad) return error(g.bad);
  if (g.pos != frame.size()) return error("size mismatch");
  return f;
}

}  // namespace p9
