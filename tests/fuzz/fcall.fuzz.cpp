// Fuzz target of the 9P2000 decoder: no input may crash it, read out of bounds or leak, and
// whatever it accepts must encode back to the same bytes and decode to the same message.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lib9p/codec.hpp"

namespace {

void check(std::span<const std::uint8_t> frame) {
  auto f = p9::decode(frame);
  if (!f) return;
  auto again = p9::encode(*f);
  if (!again || again->size() != frame.size() || std::memcmp(again->data(), frame.data(), frame.size()) != 0) std::abort();
  auto back = p9::decode(*again);
  if (!back || back->type != f->type || back->tag != f->tag || back->data != f->data || back->wname != f->wname ||
      back->stat != f->stat)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> in(data, size);
  check(in);  // as it comes: the size field is usually a lie
  // The same bytes as a message body behind an honest size field, so the fuzzer reaches the bodies.
  std::vector<std::uint8_t> framed(4 + size);
  std::uint32_t n = static_cast<std::uint32_t>(framed.size());
  framed[0] = n & 0xff;
  framed[1] = (n >> 8) & 0xff;
  framed[2] = (n >> 16) & 0xff;
  framed[3] = n >> 24;
  if (size) std::memcpy(framed.data() + 4, data, size);
  check(framed);
  (void)p9::decode_dirs(in);
  return 0;
}
