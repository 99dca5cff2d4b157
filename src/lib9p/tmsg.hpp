#pragma once
/// The T-messages a client sends, built in one place for the blocking Client and the
/// AsyncClient (the tag is chosen by the Mux).

#include <string>

#include "fcall.hpp"

namespace p9::tmsg {

inline Fcall auth(std::uint32_t afid, std::string uname, std::string aname) {
  Fcall t;
  t.type = Tauth;
  t.afid = afid;
  t.uname = std::move(uname);
  t.aname = std::move(aname);
  return t;
}

inline Fcall attach(std::uint32_t fid, std::uint32_t afid, std::string uname, std::string aname) {
  Fcall t;
  t.type = Tattach;
  t.fid = fid;
  t.afid = afid;
  t.uname = std::move(uname);
  t.aname = std::move(aname);
  return t;
}

inline Fcall open(std::uint32_t fid, std::uint8_t mode) {
  Fcall t;
  t.type = Topen;
  t.fid = fid;
  t.mode = mode;
  return t;
}

inline Fcall create(std::uint32_t fid, std::string name, std::uint32_t perm, std::uint8_t mode) {
  Fcall t;
  t.type = Tcreate;
  t.fid = fid;
  t.name = std::move(name);
  t.perm = perm;
  t.mode = mode;
  return t;
}

inline Fcall read(std::uint32_t fid, std::uint64_t offset, std::uint32_t count) {
  Fcall t;
  t.type = Tread;
  t.fid = fid;
  t.offset = offset;
  t.count = count;
  return t;
}

inline Fcall write(std::uint32_t fid, std::uint64_t offset, std::string data) {
  Fcall t;
  t.type = Twrite;
  t.fid = fid;
  t.offset = offset;
  t.data = std::move(data);
  return t;
}

/// Tclunk, Tremove, Tstat: the type and the fid.
inline Fcall on_fid(std::uint8_t type, std::uint32_t fid) {
  Fcall t;
  t.type = type;
  t.fid = fid;
  return t;
}

inline Fcall wstat(std::uint32_t fid, std::vector<std::uint8_t> stat) {
  Fcall t;
  t.type = Twstat;
  t.fid = fid;
  t.stat = std::move(stat);
  return t;
}

}  // namespace p9::tmsg
