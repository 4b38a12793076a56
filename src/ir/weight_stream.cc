#include "ir/weight_stream.h"

#include <algorithm>
#include <memory>

#include "core/error.h"

namespace hfx::ir {

bool stream_weight(const WeightRef& w, PipelinedFile& out, const std::function<int64_t(int64_t, size_t)>& block_rows,
                   const SeenBytes& seen) {
  // A constant's bytes are queued as they are. A weight that lies in the mapped checkpoint as it is
  // written is copied block by block like a converted one: queued from the map itself, write() faulted
  // each source page in the kernel while the hasher and the non-finite scan read the same pages from
  // memory again, and a whole tensor went as one item, which left nothing to overlap (the Qwen3-0.6B
  // shape's bf16 export: 2.3 s against 1.7 s copied, docs/benchmarks.md); a copied block is scanned,
  // hashed and written while it is in cache.
  if (auto raw = w.raw_bytes(); raw && w.source_bytes() == 0) {
    if (seen) seen(*raw, 0);
    out.write(*raw, [w] {});  // the constant's tensor lives as long as `w`
    return true;
  }
  if (w.streamable() && w.row_bytes() > 0) {
    const int64_t rows = w.rows();
    const size_t row = w.row_bytes();
    const int64_t step = std::max<int64_t>(1, block_rows(rows, row));
    const int64_t row_elements = int64_t(row / dtype_size(w.dtype()));
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const int64_t r1 = std::min(rows, r0 + step);
      PipelinedFile::Buffer b = out.buffer(size_t(r1 - r0) * row);
      w.write_rows(r0, r1, b.data.get(), row);
      if (seen) seen({b.data.get(), size_t(r1 - r0) * row}, r0 * row_elements);
      out.write(std::move(b));
    }
    return false;
  }
  auto tensor = std::make_shared<const Tensor>(w.materialize());  // kept until written
  HFX_CHECK(tensor->nbytes() == w.nbytes(), "{} bytes for a tensor of {}", tensor->nbytes(), w.nbytes());
  if (seen) seen({tensor->data(), tensor->nbytes()}, 0);
  out.write({tensor->data(), tensor->nbytes()}, [tensor] {});
  return false;
}

}  // namespace hfx::ir
