#include "ir/quantized_memo.h"

#include <atomic>

#include "core/error.h"

namespace hfx::ir {

namespace {

std::atomic<QuantizedMemo*> g_active{nullptr};

// Bytes of one column of W in each array of quantize_blockwise's arrangement.
struct ColumnBytes {
  size_t data, scales, zero_points;
};

ColumnBytes column_bytes(int64_t K, const QuantizedMemo::Scheme& s) {
  const int64_t kb = quant::k_blocks(K, s.block);
  return {size_t(kb * quant::blob_bytes(s.bits, s.block)), size_t(kb),
          s.symmetric ? 0 : size_t(quant::zero_point_bytes_per_column(s.bits, K, s.block))};
}

size_t memory_of(const quant::Quantized& q) {
  return q.data.size() + q.scales.size() * sizeof(float) + q.zero_points.size();
}

}  // namespace

std::optional<quant::Quantized> QuantizedMemo::take(const std::vector<Stored>& parts, const Scheme& scheme) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Stored& p : parts)
    if (!entries_.count({p, scheme})) return std::nullopt;
  quant::Quantized whole;
  for (const Stored& p : parts) {
    auto it = entries_.find({p, scheme});
    kept_ -= memory_of(it->second);
    if (parts.size() == 1) {
      whole = std::move(it->second);
    } else {
      quant::append_columns(whole, it->second);
    }
    entries_.erase(it);
  }
  return whole;
}

void QuantizedMemo::keep(const std::vector<Stored>& parts, const Scheme& scheme, const quant::Quantized& whole) {
  if (parts.empty()) return;
  const ColumnBytes per = column_bytes(parts.front().cols, scheme);
  int64_t columns = 0;
  for (const Stored& p : parts) columns += p.rows;
  HFX_CHECK(whole.data.size() == size_t(columns) * per.data && whole.scales.size() == size_t(columns) * per.scales &&
                whole.zero_points.size() == size_t(columns) * per.zero_points,
            "quantized weight of {} columns does not match its parts' arrangement", columns);
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n0 = 0;  // the part's first column
  for (const Stored& p : parts) {
    const size_t n = size_t(p.rows), bytes = n * (per.data + per.scales * sizeof(float) + per.zero_points);
    if (kept_ + bytes > budget_ || entries_.count({p, scheme})) {
      n0 += n;
      continue;
    }
    quant::Quantized part;
    part.data.assign(whole.data.begin() + long(n0 * per.data), whole.data.begin() + long((n0 + n) * per.data));
    part.scales.assign(whole.scales.begin() + long(n0 * per.scales), whole.scales.begin() + long((n0 + n) * per.scales));
    part.zero_points.assign(whole.zero_points.begin() + long(n0 * per.zero_points),
                            whole.zero_points.begin() + long((n0 + n) * per.zero_points));
    n0 += n;
    kept_ += bytes;
    entries_.emplace(Key{p, scheme}, std::move(part));
  }
}

size_t QuantizedMemo::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_;
}

QuantizedMemo* QuantizedMemo::active() { return g_active.load(std::memory_order_acquire); }

QuantizedMemo::Scope::Scope(QuantizedMemo& memo) {
  QuantizedMemo* none = nullptr;
  installed_ = g_active.compare_exchange_strong(none, &memo, std::memory_order_acq_rel);
}

QuantizedMemo::Scope::~Scope() {
  if (installed_) g_active.store(nullptr, std::memory_order_release);
}

}  // namespace hfx::ir
