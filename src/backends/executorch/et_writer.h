// Writes an EtProgram as a `.pte` file ExecuTorch's runtime loads: the Program flatbuffer (built with
// the flatbuffers library from the schema the executorch wheel ships, schema/program.fbs, identifier
// ET12), the 32-byte `eh00` extended header after its first 8 bytes, and the constant segment at a
// 128-byte-aligned base, each constant 16-byte aligned (constant_segment.offsets[0] is the reserved
// placeholder). Constants are streamed one at a time from their mapped checkpoint tensors and hashed
// as they are written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "backends/executorch/et_program.h"

namespace hfx::executorch_backend {

struct EtWritten {
  std::filesystem::path file;
  std::string sha256;
  uintmax_t size = 0;
  int64_t constant_bytes = 0;     // the constant segment's tensor bytes
  int64_t source_bytes_read = 0;  // checkpoint bytes read for them
};

EtWritten write_pte(const EtProgram& program, const std::filesystem::path& file,
                    const std::function<void(int64_t n, int64_t bytes)>& on_constant_written);

}  // namespace hfx::executorch_backend
