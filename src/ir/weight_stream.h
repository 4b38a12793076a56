// Queues a weight's bytes on a PipelinedFile holding at most one block of rows at a time: the one
// way every writer that streams weights into a file of its own (ONNX external data, the ExecuTorch
// constant segment and named data) takes them from the mapped checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/pipelined_file.h"
#include "ir/weight.h"

namespace hfx::ir {

// `seen(bytes, first_element)` sees each piece before it is queued (the ONNX writer counts non-finite
// values there); `first_element` is the index of the piece's first element in the tensor.
using SeenBytes = std::function<void(std::span<const uint8_t>, int64_t)>;

// Queues `w` on `out`:
//   - a constant's bytes themselves: returns true (the caller must not release them sooner);
//   - else blocks of `block_rows(rows, row_bytes)` whole rows, copied or converted from the mapped
//     source as they are queued (a cast or transposed tensor never exists whole);
//   - else the tensor materialised once, kept until written.
// Returns false in the last two cases: the source pages may be released as soon as this returns.
bool stream_weight(const WeightRef& w, PipelinedFile& out, const std::function<int64_t(int64_t, size_t)>& block_rows,
                   const SeenBytes& seen = {});

}  // namespace hfx::ir
