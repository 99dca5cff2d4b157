#pragma once
/// 9P2000 message types, constants and structures, as Plan 9's fcall.h and intro(5) define them.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace p9 {

enum MsgType : std::uint8_t {
  Tversion = 100, Rversion, Tauth, Rauth, Tattach, Rattach, Terror /* illegal */, Rerror,
  Tflush, Rflush, Twalk, Rwalk, Topen, Ropen, Tcreate, Rcreate, Tread, Rread,
  Twrite, Rwrite, Tclunk, Rclunk, Tremove, Rremove, Tstat, Rstat, Twstat, Rwstat,
};

inline constexpr std::uint16_t NOTAG = 0xFFFF;
inline constexpr std::uint32_t NOFID = 0xFFFFFFFF;
inline constexpr std::size_t MAXWELEM = 16;
inline constexpr std::uint32_t IOHDRSZ = 24;   ///< header room of Twrite/Rread: msize - IOHDRSZ is the largest payload
inline constexpr std::uint32_t STATFIXLEN = 49; ///< fixed part of a stat entry, its size field included
inline constexpr std::uint32_t MAX_MSIZE = 65536;
inline constexpr std::uint32_t MIN_MSIZE = 256;
inline constexpr std::size_t ERRMAX = 128;       ///< an error string is at most ERRMAX-1 bytes (libc.h, spec §1.8)
inline constexpr std::size_t MAXSTRING = 65535;  ///< a string's length field is 16 bits
inline constexpr const char* VERSION9P = "9P2000";

// Open modes.
inline constexpr std::uint8_t OREAD = 0, OWRITE = 1, ORDWR = 2, OEXEC = 3, OTRUNC = 0x10, ORCLOSE = 0x40;

// Qid types and the matching high bits of Dir.mode.
inline constexpr std::uint8_t QTDIR = 0x80, QTAPPEND = 0x40, QTEXCL = 0x20, QTAUTH = 0x08, QTTMP = 0x04, QTFILE = 0;
inline constexpr std::uint32_t DMDIR = 0x80000000, DMAPPEND = 0x40000000, DMEXCL = 0x20000000,
                               DMAUTH = 0x08000000, DMTMP = 0x04000000;

struct Qid {
  std::uint8_t type = 0;
  std::uint32_t vers = 0;
  std::uint64_t path = 0;
  bool operator==(const Qid&) const = default;
};

/// A stat entry (stat(5)). "Don't touch" values of Twstat are ~0 and empty strings.
struct Dir {
  std::uint16_t type = 0;
  std::uint32_t dev = 0;
  Qid qid;
  std::uint32_t mode = 0;
  std::uint32_t atime = 0;
  std::uint32_t mtime = 0;
  std::uint64_t length = 0;
  std::string name, uid, gid, muid;
  bool operator==(const Dir&) const = default;

  /// A Dir whose every field is "don't touch" (the starting point of a Twstat).
  static Dir null();
};

/// One 9P message; which fields mean something depends on type, as in Plan 9's Fcall.
struct Fcall {
  std::uint8_t type = 0;
  std::uint16_t tag = 0;
  std::uint32_t fid = 0;
  std::uint32_t msize = 0;           // Tversion, Rversion
  std::string version;               // Tversion, Rversion
  std::uint16_t oldtag = 0;          // Tflush
  std::string ename;                 // Rerror
  Qid qid;                           // Rattach, Ropen, Rcreate
  std::uint32_t iounit = 0;          // Ropen, Rcreate
  Qid aqid;                          // Rauth
  std::uint32_t afid = 0;            // Tauth, Tattach
  std::string uname, aname;          // Tauth, Tattach
  std::uint32_t perm = 0;            // Tcreate
  std::string name;                  // Tcreate
  std::uint8_t mode = 0;             // Topen, Tcreate
  std::uint32_t newfid = 0;          // Twalk
  std::vector<std::string> wname;    // Twalk
  std::vector<Qid> wqid;             // Rwalk
  std::uint64_t offset = 0;          // Tread, Twrite
  std::uint32_t count = 0;           // Tread, Rwrite
  std::string data;                  // Twrite, Rread (bytes)
  std::vector<std::uint8_t> stat;    // Rstat, Twstat (one encoded Dir)
};

/// The name of a message type ("Twalk"), or "unknown".
const char* type_name(std::uint8_t type);

}  // namespace p9
