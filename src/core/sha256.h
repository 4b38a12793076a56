// Streaming SHA-256 (OpenSSL EVP, so SHA-NI where the CPU has it): feed bytes as they are produced
// and take the digest at the end, so a file can be hashed while it is written instead of re-read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace hfx {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const uint8_t> bytes);
  void update_zeros(size_t count);  // alignment padding
  // Lower-case hex of everything fed so far; the object is spent afterwards.
  std::string hex_digest();

 private:
  void* ctx_;  // EVP_MD_CTX, kept out of this header
};

}  // namespace hfx
