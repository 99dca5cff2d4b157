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

/// Appends the encoded message to out.
void encode(const Fcall& f, std::vector<std::uint8_t>& out);
std::vector<std::uint8_t> encode(const Fcall& f);

/// Decodes one whole frame (size field included). The frame's size field must equal frame.size().
/// On error nothing is returned but the reason; `tag_of` recovers the tag of a frame for an Rerror.
Result<Fcall> decode(std::span<const std::uint8_t> frame);

/// The tag of a frame of at least 7 bytes, else NOTAG.
std::uint16_t tag_of(std::span<const std::uint8_t> frame);

/// Size of the stat entry of d, its own size field included.
std::size_t dir_size(const Dir& d);
void encode_dir(const Dir& d, std::vector<std::uint8_t>& out);
std::vector<std::uint8_t> encode_dir(const Dir& d);

/// Decodes exactly one stat entry that fills `buf` (as carried by Rstat and Twstat).
Result<Dir> decode_dir(std::span<const std::uint8_t> buf);

/// Splits a directory read's data into its stat entries; an entry that does not fit is an error.
Result<std::vector<Dir>> decode_dirs(std::span<const std::uint8_t> buf);

}  // namespace p9
