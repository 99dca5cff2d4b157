#pragma once
/// The pure 9P2000 codec: bytes in, Fcall out, and back (Plan 9's convM2S, convS2M, sizeS2M).
/// Decoding never reads past the frame and never trusts a length field.

#include <cstdint>
#include <span>
#include <vector>

#include "fcall.hpp"
#include "result.hpp"

namespace p9 {

/// Bytes the encoded message takes, its size field included.
std::size_t encoded_size(const Fcall& f);

/// Whether f can be encoded: every string and stat entry at most MAXSTRING bytes, at most 65535
/// walk elements, the whole under 4 GiB. A length or count field is never allowed to wrap.
Status encodable(const Fcall& f);

/// Appends the encoded message to out; refuses (appending nothing) what `encodable` refuses.
Status encode(const Fcall& f, std::vector<std::uint8_t>& out);
Result<std::vector<std::uint8_t>> encode(const Fcall& f);

/// Decodes one whole frame (size field included). The frame's size field must equal frame.size().
/// On error nothing is returned but the reason; `tag_of` recovers the tag of a frame for an Rerror.
Result<Fcall> decode(std::span<const std::uint8_t> frame);

/// The tag of a frame of at least 7 bytes, else NOTAG.
std::uint16_t tag_of(std::span<const std::uint8_t> frame);

/// Size of the stat entry of d, its own size field included.
std::size_t dir_size(const Dir& d);
/// Appends the stat entry of d; refuses (appending nothing) an entry over MAXSTRING bytes.
Status encode_dir(const Dir& d, std::vector<std::uint8_t>& out);
Result<std::vector<std::uint8_t>> encode_dir(const Dir& d);

/// Decodes exactly one stat entry that fills `buf` (as carried by Rstat and Twstat).
Result<Dir> decode_dir(std::span<const std::uint8_t> buf);

/// The reader's decision about the unread bytes of a connection (pure: no I/O).
struct Framing {
  enum Kind {
    More,      ///< read more: `size` bytes must be unread for the next decision (0 until 4 are in)
    Whole,     ///< a whole frame of `size` bytes starts the buffer
    Oversize,  ///< a frame over msize: answer its tag (the 7 header bytes are in), skip `size` bytes
    Bad,       ///< a size under 7 or over MAX_FRAME: the stream cannot be trusted
  };
  Kind kind = More;
  std::uint32_t size = 0;
  bool operator==(const Framing&) const = default;
};

/// A frame's size field above this ends the connection; up to it an oversized frame is skipped.
inline constexpr std::uint32_t MAX_FRAME = 16u << 20;

/// What starts `unread` when frames may be at most msize bytes.
Framing frame_at(std::span<const std::uint8_t> unread, std::uint32_t msize);

/// Splits a directory read's data into its stat entries; an entry that does not fit is an error.
Result<std::vector<Dir>> decode_dirs(std::span<const std::uint8_t> buf);

}  // namespace p9
