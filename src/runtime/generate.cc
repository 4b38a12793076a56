#include "runtime/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/memory.h"
#include "runtime/decode_step.h"
#include "runtime/executor.h"

namespace hfx::runtime {

namespace {

class ExecutorRunner final : public StepRunner {
 public:
  ExecutorRunner(const ir::Graph& g, ExecOptions options) : exec_(g, std::move(options)) {
    for (auto id : g.inputs()) names_.push_back(g.value(id).name);
  }
  std::vector<std::string> input_names() const override { return names_; }
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) override { return exec_.run(inputs); }

 private:
  Executor exec_;
  std::vector<std::string> names_;
};

Tensor i64_tensor(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  return Tensor::from_vector<int64_t>(DType::I64, std::move(shape), values);
}

}  // namespace

std::unique_ptr<StepRunner> make_executor_runner(const ir::Graph& graph, ExecOptions options) {
  return std::make_unique<ExecutorRunner>(graph, std::move(options));
}

std::vector<std::vector<int64_t>> generate(StepRunner& first, StepRunner& next, const CacheSpec& cache,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const SamplingOptions& o,
                                           const std::function<void(size_t, int64_t)>& on_token) {
  if (prompts.empty()) bad_input("generate: no prompt given");
  const auto B = int64_t(prompts.size());
  int64_t L = 0;
  for (const auto& p : prompts) {
    if (p.empty()) bad_input("generate: a prompt is empty");
    L = std::max<int64_t>(L, int64_t(p.size()));
  }
  if (cache.static_cache && L + o.max_new_tokens > cache.max_cache_len)
    bad_input("generate: prompt of {} tokens + {} new tokens exceeds the static cache (max_cache_len = {})", L,
              o.max_new_tokens, cache.max_cache_len);

  // Left padding: prompts end at the same column.
  std::vector<int64_t> ids(size_t(B * L), o.pad_token_id), mask(size_t(B * L), 0);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[size_t(b)];
    const int64_t off = L - int64_t(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      ids[size_t(b * L + off) + i] = p[i];
      mask[size_t(b * L + off) + i] = 1;
    }
  }
  // Positions: cumsum(mask) - 1, pads at 1 (Transformers' generate()).
  std::vector<int64_t> next_pos(size_t(B), 0);
  std::vector<int64_t> pos(static_cast<size_t>(B * L));
  for (int64_t b = 0; b < B; ++b) {
    int64_t c = 0;
    for (int64_t i = 0; i < L; ++i) {
      c += mask[size_t(b * L + i)];
      pos[size_t(b * L + i)] = mask[size_t(b * L + i)] ? c - 1 : 1;
    }
    next_pos[size_t(b)] = c;
  }

  // The cache: empty and growing, or fixed-size buffers written in place.
  const int64_t cache_len = cache.static_cache ? cache.max_cache_len : 0;
  // Its geometry comes from an export's manifest, which whoever shipped it wrote (hostile-input D5).
  check_state_memory(cache, B, cache.static_cache ? cache_len : L + o.max_new_tokens, 0);
  std::map<std::string, Tensor> past;
  for (const auto& p : cache.states) past[p.past] = Tensor(p.spec.dtype, tasks::state_dims(p.spec, B, cache_len));
  std::vector<int64_t> full_mask;  // [B, total] (growing) or [B, N] (static)
  if (cache.static_cache) {
    full_mask.assign(size_t(B * cache_len), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i) full_mask[size_t(b * cache_len + i)] = mask[size_t(b * L + i)];
  } else {
    full_mask = mask;
  }

  Sampler sampler(o);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  std::vector<bool> done(size_t(B), false);
  const std::set<int64_t> eos(o.eos_token_ids.begin(), o.eos_token_ids.end());
  int64_t total = L;  // tokens in the cache after this step
  std::vector<int64_t> step_ids = ids, step_pos = pos;
  int64_t S = L;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    StepRunner& runner = step == 0 ? first : next;
    std::map<std::string, Tensor> feed;
    feed["input_ids"] = i64_tensor({B, S}, step_ids);
    // A graph without position_ids (the onnx ort profile) derives positions from the cache length.
    const auto names = runner.input_names();
    if (std::find(names.begin(), names.end(), "position_ids") != names.end())
      feed["position_ids"] = i64_tensor({B, S}, step_pos);
    feed["attention_mask"] = i64_tensor({B, cache.static_cache ? cache_len : total}, full_mask);
    if (cache.static_cache) {
      std::vector<int64_t> cp(static_cast<size_t>(S));
      std::iota(cp.begin(), cp.end(), total - S);
      feed["cache_position"] = i64_tensor({S}, cp);
    }
    // A prefill graph takes no cache; a stateful runner (OpenVINO) keeps it inside, with neither the
    // state's past inputs nor its present outputs.
    const bool wants_past = !cache.states.empty() &&
                            std::find(names.begin(), names.end(), cache.states.front().past) != names.end();
    if (wants_past)
      for (auto& [name, t] : past) feed[name] = std::move(t);
    auto result = runner.run(feed);
    for (const auto& p : cache.states)
      if (auto it = result.find(p.present); it != result.end()) past[p.past] = std::move(it->second);

    const Tensor& logits = step_logits(result, B, S);  // [B, S, V]
    const int64_t V = logits.dim(2);
    std::vector<int64_t> chosen(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      const float* row = logits.as<float>() + (b * S + S - 1) * V;
      int64_t tok = done[size_t(b)] ? o.pad_token_id : sampler.pick(row, V);
      chosen[size_t(b)] = tok;
      out[size_t(b)].push_back(tok);
      if (!done[size_t(b)]) {
        if (on_token) on_token(size_t(b), tok);
        if (eos.count(tok)) done[size_t(b)] = true;
      }
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    if (step + 1 == o.max_new_tokens) break;

    // Next step: the chosen tokens, one position further, the mask one column longer.
    S = 1;
    step_ids = chosen;
    for (int64_t b = 0; b < B; ++b) step_pos[size_t(b)] = next_pos[size_t(b)]++;
    step_pos.resize(size_t(B));
    if (cache.static_cache) {
      for (int64_t b = 0; b < B; ++b) full_mask[size_t(b * cache_len + total)] = 1;
    } else {
      std::vector<int64_t> grown(static_cast<size_t>(B * (total + 1)));
      for (int64_t b = 0; b < B; ++b) {
        std::copy_n(full_mask.begin() + b * total, total, grown.begin() + b * (total + 1));
        grown[size_t(b * (total + 1) + total)] = 1;
      }
      full_mask = std::move(grown);
    }
    ++total;
  }
  return out;
}

}  // namespace hfx::runtime
