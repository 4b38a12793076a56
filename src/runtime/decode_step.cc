#include "runtime/decode_step.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/memory.h"

namespace hfx::runtime {

namespace {

std::string detail_shape(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

int64_t Sampler::pick(const float* logits, int64_t vocab) {
  if (o_.temperature <= 0) return int64_t(std::max_element(logits, logits + vocab) - logits);  // first max, as torch.argmax
  std::vector<double> scores(logits, logits + vocab);
  for (auto& s : scores) s /= o_.temperature;
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[size_t(a)] > scores[size_t(b)]; });
  size_t keep = size_t(vocab);
  if (o_.top_k > 0) keep = std::min(keep, size_t(o_.top_k));
  const double max = scores[size_t(order[0])];
  std::vector<double> p(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(scores[size_t(order[i])] - max);
  if (o_.top_p < 1.0) {
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      cum += p[n] / sum;
      ++n;
      if (cum >= o_.top_p) break;
    }
    keep = n;
    p.resize(keep);
  }
  std::discrete_distribution<size_t> dist(p.begin(), p.end());
  return order[dist(rng_)];
}

const Tensor& step_logits(const std::map<std::string, Tensor>& result, int64_t rows, int64_t seq) {
  auto found = result.find("logits");
  if (found == result.end()) bad_input("generate: the step graph has no `logits` output");
  const Tensor& logits = found->second;
  if (logits.dtype() != DType::F32 || logits.rank() != 3 || logits.dim(0) != rows || logits.dim(1) != seq ||
      logits.dim(2) < 1)
    bad_input("generate: the step graph's logits are {}{}, expected f32[{}, {}, vocab]", dtype_name(logits.dtype()),
              detail_shape(logits.shape()), rows, seq);
  return logits;
}

void check_state_memory(const CacheSpec& cache, int64_t rows, int64_t longest, int64_t source) {
  if (cache.states.empty()) return;
  auto dims = [&](const tasks::StatePort& p) {
    return tasks::state_dims(p.spec, rows, p.spec.update == tasks::StateUpdate::Keep ? source : longest);
  };
  double bytes = 0;
  for (const auto& p : cache.states) {
    double n = double(dtype_size(p.spec.dtype));
    for (int64_t d : dims(p)) n *= double(d);
    bytes += n;
  }
  const auto available = available_memory_bytes();
  if (available && bytes > double(*available))
    bad_input("generate: the KV cache would need {:.1f} GiB ({} cache tensors such as {}{}: {} rows x {} positions), "
              "more than the {:.1f} GiB of memory available",
              bytes / double(1 << 30), cache.states.size(), dtype_name(cache.states.front().spec.dtype),
              detail_shape(dims(cache.states.front())), rows, longest, double(*available) / double(1 << 30));
}

}  // namespace hfx::runtime
