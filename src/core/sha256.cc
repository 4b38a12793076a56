#include "core/sha256.h"

#include <openssl/evp.h>

#include <array>

#include "core/error.h"

namespace hfx {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  HFX_CHECK(ctx_ && EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1,
            "sha256: OpenSSL init failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(std::span<const uint8_t> bytes) {
  if (!bytes.empty()) EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size());
}

void Sha256::update_zeros(size_t count) {
  static const std::array<uint8_t, 4096> zeros{};
  while (count > 0) {
    const size_t n = std::min(count, zeros.size());
    update({zeros.data(), n});
    count -= n;
  }
}

std::string Sha256::hex_digest() {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest.data(), &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

}  // namespace hfx
