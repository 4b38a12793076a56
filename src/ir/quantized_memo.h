// Blockwise quantizations of checkpoint tensors kept for the rest of one export, so that its check's
// reference does not quantize again what the export's writers quantized moments before. Quantizing is
// a function of the stored values and the scheme: the same bytes either way, taken here from memory,
// never read back from the artifact, whose bytes the check is there to prove. On the Qwen3-0.6B shape
// the reference's side of an int4 export's check spent a third of its CPU re-quantizing.
//
// An entry is one stored tensor (file, offset, dtype, [rows, cols]) under one scheme: the rows of W^T
// [N, K] a Linear weight is quantized from, in the arrangement quantize_blockwise returns (MatMulNBits':
// each column's data, scales and zero points together), before any relayout. A packed q|k|v quantized
// whole is kept as its three tensors, which the reference asks for apart (columns split and join, as
// quantize_nk_in_chunks' chunks do). An entry is handed out once (`take`): its memory goes with it.
// Entries past the byte budget are not kept; those weights are quantized again, as without a memo.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "quant/quantize.h"

namespace hfx::ir {

class QuantizedMemo {
 public:
  // One stored 2-D tensor read as `rows` columns of W (rows of W^T) of `cols` = K values each. Its file
  // by identity: the check opens the checkpoint again.
  struct Stored {
    MappedFile::Identity file;
    size_t offset;
    DType dtype;
    int64_t rows, cols;
    auto operator<=>(const Stored&) const = default;
  };
  struct Scheme {
    int bits;
    int64_t block;
    bool symmetric;
    DType scale_dtype;
    auto operator<=>(const Scheme&) const = default;
  };

  explicit QuantizedMemo(size_t budget_bytes) : budget_(budget_bytes) {}

  // The quantization of W^T = the `parts` stacked (their columns in order), when every part is kept;
  // the parts leave the memo. nullopt when any part is missing (the kept ones stay).
  std::optional<quant::Quantized> take(const std::vector<Stored>& parts, const Scheme& scheme);
  // Keeps `whole`, the quantization of the stacked `parts`, split per part, as far as the budget goes.
  void keep(const std::vector<Stored>& parts, const Scheme& scheme, const quant::Quantized& whole);
  size_t kept_bytes() const;

  // The memo quantize calls consult while a Scope lives (nullptr: none). The writers quantize on threads
  // of their own, so it is one per process, not per thread; a Scope opened while another's memo is
  // active leaves that one in place (entries are keyed by file, so either gives the same bytes) and
  // never outlives it.
  static QuantizedMemo* active();
  class Scope {
   public:
    explicit Scope(QuantizedMemo& memo);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    bool installed_ = false;
  };

 private:
  using Key = std::pair<Stored, Scheme>;
  mutable std::mutex mutex_;
  size_t budget_, kept_ = 0;
  std::map<Key, quant::Quantized> entries_;
};

}  // namespace hfx::ir
