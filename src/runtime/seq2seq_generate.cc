#include "runtime/seq2seq_generate.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "runtime/decode_step.h"

namespace hfx::runtime {

namespace {

Tensor i64_tensor(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  return Tensor::from_vector<int64_t>(DType::I64, std::move(shape), values);
}

// The output `name` of a step, which a graph from a file may lack.
Tensor take(std::map<std::string, Tensor>& result, const std::string& name, const char* step) {
  auto it = result.find(name);
  if (it == result.end()) bad_input("generate: the decoder's {} has no `{}` output", step, name);
  return std::move(it->second);
}

}  // namespace

std::vector<std::vector<int64_t>> generate_seq2seq(const Seq2SeqRunners& r, const CacheSpec& cache,
                                                   const std::vector<std::vector<int64_t>>& sources, int64_t start,
                                                   const SamplingOptions& o,
                                                   const std::function<void(size_t, int64_t)>& on_token) {
  if (sources.empty()) bad_input("generate: no prompt given");
  const auto B = int64_t(sources.size());
  int64_t L = 0;
  for (const auto& s : sources) {
    if (s.empty()) bad_input("generate: a prompt is empty");
    L = std::max<int64_t>(L, int64_t(s.size()));
  }
  check_state_memory(cache, B, 1 + o.max_new_tokens, L);
  // Right padding: each source starts at column 0.
  std::vector<int64_t> ids(size_t(B * L), o.pad_token_id), mask(size_t(B * L), 0);
  for (int64_t b = 0; b < B; ++b)
    for (size_t i = 0; i < sources[size_t(b)].size(); ++i) {
      ids[size_t(b * L) + i] = sources[size_t(b)][i];
      mask[size_t(b * L) + i] = 1;
    }
  const Tensor source_mask = i64_tensor({B, L}, mask);
  auto encoded = r.encoder.run({{"input_ids", i64_tensor({B, L}, ids)}, {"attention_mask", source_mask}});
  Tensor hidden = take(encoded, "last_hidden_state", "encoder");

  Sampler sampler(o);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  std::vector<bool> done(size_t(B), false);
  const std::set<int64_t> eos(o.eos_token_ids.begin(), o.eos_token_ids.end());
  std::vector<int64_t> step_ids(size_t(B), start);
  std::map<std::string, Tensor> past;  // every state's past input, by name
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    std::map<std::string, Tensor> feed = {{"input_ids", i64_tensor({B, 1}, step_ids)},
                                          {"encoder_attention_mask", source_mask}};
    if (step == 0) feed["encoder_hidden_states"] = hidden;
    else
      for (const auto& [name, t] : past) feed[name] = t;
    auto result = (step == 0 ? r.first : r.next).run(feed);
    // The self-attention cache grows every step; the cross-attention state comes from the first.
    for (const auto& p : cache.states)
      if (step == 0 || p.spec.update != tasks::StateUpdate::Keep)
        past[p.past] = take(result, p.present, step == 0 ? "first step" : "step");
    const Tensor& logits = step_logits(result, B, 1);
    const int64_t V = logits.dim(2);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t tok = done[size_t(b)] ? o.pad_token_id : sampler.pick(logits.as<float>() + b * V, V);
      step_ids[size_t(b)] = tok;
      out[size_t(b)].push_back(tok);
      if (done[size_t(b)]) continue;
      if (on_token) on_token(size_t(b), tok);
      if (eos.count(tok)) done[size_t(b)] = true;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  return out;
}

}  // namespace hfx::runtime
