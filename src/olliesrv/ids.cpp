#include "ids.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <uuid/uuid.h>

#include <stdexcept>

namespace ollie {

namespace {

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; i++) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

}  // namespace

std::string new_uuid() {
  uuid_t u;
  uuid_generate_random(u);
  char text[37];
  uuid_unparse_lower(u, text);
  return text;
}

bool looks_like_uuid(std::string_view s) {
  if (s.size() != 36) return false;
  std::string z(s);
  uuid_t u;
  return uuid_parse(z.c_str(), u) == 0;
}

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 64 || n == "new" || n == "idx" || looks_like_uuid(n)) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  if (!alnum(n[0])) return false;
  for (char c : n)
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

std::string invalid_name(std::string_view n) { return "invalid name: " + std::string(n); }

std::string new_secret() {
  unsigned char b[32];
  if (RAND_bytes(b, sizeof b) != 1) throw std::runtime_error("RAND_bytes failed");
  return hex(b, sizeof b);
}

std::string block_id(std::string_view session_id, std::string_view agent_id, unsigned long long counter) {
  std::string text;
  text.reserve(session_id.size() + agent_id.size() + 20);
  text.append(session_id).append(agent_id).append(std::to_string(counter));
  // Fetched once: SHA256() fetches the algorithm again at every call.
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  unsigned char d[EVP_MAX_MD_SIZE];
  if (!sha256 || EVP_Digest(text.data(), text.size(), d, nullptr, sha256, nullptr) != 1)
    throw std::runtime_error("block id: SHA-256 unavailable");
  return hex(d, 4);
}

bool same_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ollie
