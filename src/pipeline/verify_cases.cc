#include "pipeline/verify_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <set>

#include "runtime/executor.h"

namespace hfx::pipeline {

namespace {

Tensor i64s(std::vector<int64_t> shape, const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(DType::I64, shape, v); }

// Columns [from, to) of a [rows, cols] int64 tensor.
Tensor columns(const Tensor& t, int64_t from, int64_t to) {
  const int64_t rows = t.shape().at(0), cols = t.shape().at(1);
  std::vector<int64_t> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = from; c < to; ++c) v.push_back(t.as<int64_t>()[r * cols + c]);
  return i64s({rows, to - from}, v);
}

}  // namespace

std::optional<int64_t> bound(const ir::Graph& g, const std::string& sym, bool upper) {
  if (!g.symbols().has(sym)) return std::nullopt;
  const auto& b = g.symbols().bounds(sym);
  return upper ? b.max : b.min;
}

std::vector<ShapeCase> shape_matrix(const ir::Graph& g, const std::string& role, const runtime::CacheSpec& cache,
                                    bool full, bool chunked_batches) {
  const int64_t b_lo = std::max<int64_t>(1, bound(g, "batch_size", false).value_or(1));
  const int64_t b_hi = std::min<int64_t>(4, bound(g, "batch_size", true).value_or(2));
  int64_t s_hi = std::min<int64_t>(16, bound(g, "sequence_length", true).value_or(8));
  int64_t total_hi = cache.static_cache ? cache.max_cache_len
                                        : std::min<int64_t>(64, bound(g, "total_sequence_length", true).value_or(s_hi + 16));
  if (auto p = bound(g, "past_sequence_length", true)) total_hi = std::min(total_hi, *p + s_hi);
  s_hi = std::max<int64_t>(1, std::min(s_hi, total_hi));
  const int64_t s_mid = std::max<int64_t>(1, (1 + s_hi) / 2);
  std::vector<ShapeCase> cases;
  auto add = [&](std::string name, int64_t b, int64_t s, int64_t p) {
    if (role == "prefill" || role == "encoder") p = 0;
    if (role == "decode") s = 1;
    p = std::max<int64_t>(0, std::min(p, total_hi - s));
    for (const auto& c : cases)
      if (c.batch == b && c.seq == s && c.past == p) return;
    cases.push_back({std::move(name), b, s, p});
  };
  add("prompt, batch max", b_hi, s_hi, 0);
  add("decode, cache partial", b_lo, 1, total_hi / 2);
  if (full) {
    add("prompt, batch min", b_lo, s_hi, 0);
    add("chunk, cache partial", chunked_batches ? b_hi : 1, s_mid, total_hi / 3);
    add("decode, cache near full", b_hi, 1, total_hi - 1);
    add("sequence max, cache near full", b_lo, s_hi, total_hi - s_hi);
  }
  return cases;
}

std::map<std::string, Tensor> own_inputs(const ir::Graph& g, std::map<std::string, Tensor> in) {
  std::map<std::string, Tensor> out;
  for (auto id : g.inputs())
    if (auto it = in.find(g.value(id).name); it != in.end()) out.emplace(it->first, std::move(it->second));
  return out;
}

std::map<std::string, Tensor> make_inputs(const ir::Graph& g, const ShapeCase& c, const runtime::CacheSpec& cache,
                                          int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::map<std::string, Tensor> in;
  const int64_t B = c.batch, S = c.seq, P = c.past, T = P + S;
  const int64_t mask_len = cache.static_cache ? cache.max_cache_len : T;
  std::set<std::string> wanted;
  for (auto id : g.inputs()) wanted.insert(g.value(id).name);
  bool writes_cache = false;
  for (auto id : g.outputs()) writes_cache = writes_cache || g.value(id).name.starts_with("present.");
  const bool decoder = wanted.count("position_ids") || wanted.count("past_key_values.0.key") || writes_cache;
  // A decoder without position_ids (the onnx ort profile, its split prefill too) keeps each row's keys
  // from position 0 in its cache (GroupQueryAttention's own format), so the cases fed a cache the
  // reference made use unpadded rows; its padded rows are checked by the greedy generation.
  const bool left_pad = wanted.count("position_ids") || !decoder;
  std::vector<int64_t> ids(size_t(B * S)), pos(size_t(B * S)), mask(size_t(B * mask_len), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pad = left_pad ? std::min<int64_t>(2 * b, T - 1) : 0;
    int64_t count = 0;
    for (int64_t j = 0; j < T; ++j) {
      const bool real = j >= pad;
      mask[size_t(b * mask_len + j)] = real;
      count += real;
      if (j >= P) pos[size_t(b * S + j - P)] = real ? count - 1 : 1;
    }
    for (int64_t i = 0; i < S; ++i) ids[size_t(b * S + i)] = int64_t(rng() % uint64_t(vocab));
  }
  in["input_ids"] = i64s({B, S}, ids);
  // The reference graph reads position_ids even when the artifact does not (onnx ort profile);
  // run() hands each graph only its own inputs.
  if (decoder) in["position_ids"] = i64s({B, S}, pos);
  in["attention_mask"] = i64s({B, mask_len}, mask);
  if (wanted.count("token_type_ids")) {
    std::vector<int64_t> types(static_cast<size_t>(B * S));
    for (int64_t i = 0; i < B * S; ++i) types[size_t(i)] = (i % S) >= S / 2;  // two segments
    in["token_type_ids"] = i64s({B, S}, types);
  }
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto id : g.inputs()) {
    const std::string& name = g.value(id).name;
    if (!name.starts_with("past_key_values.")) continue;
    Tensor t(DType::F32, {B, cache.num_kv_heads, cache.static_cache ? cache.max_cache_len : P, cache.head_dim});
    float* p = t.as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(rng);
    in[name] = std::move(t);
  }
  if (cache.static_cache) {
    std::vector<int64_t> cp(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) cp[size_t(i)] = P + i;
    in["cache_position"] = i64s({S}, cp);
  }
  return in;
}

// A case for an artifact that keeps its cache as state (OpenVINO's stateful decoder): the cache is
// filled by really running the first `past` tokens. Returns the inputs of that first step (nullopt
// when past is 0) and sets `step` to the second step's inputs, whose past_key_values.* are the
// reference's present.* after the first step, so the reference runs the step exactly as the state
// holder does. Rows are left-padded as make_inputs does, over the whole past + sequence.
std::optional<std::map<std::string, Tensor>> stateful_case(const ir::Graph& ref, const ShapeCase& c,
                                                           const runtime::CacheSpec& cache, int64_t vocab, uint64_t seed,
                                                           std::map<std::string, Tensor>& step) {
  const int64_t P = c.past, T = c.past + c.seq;
  auto whole = make_inputs(ref, {c.name, c.batch, T, 0}, cache, vocab, seed);  // empty past tensors
  if (P == 0) {
    step = std::move(whole);
    return std::nullopt;
  }
  std::map<std::string, Tensor> first = whole;
  first["input_ids"] = columns(whole.at("input_ids"), 0, P);
  first["position_ids"] = columns(whole.at("position_ids"), 0, P);
  first["attention_mask"] = columns(whole.at("attention_mask"), 0, P);
  auto presents = runtime::Executor(ref).run(first);
  step = whole;
  step["input_ids"] = columns(whole.at("input_ids"), P, T);
  step["position_ids"] = columns(whole.at("position_ids"), P, T);
  for (int64_t l = 0; l < cache.num_layers; ++l)
    for (const char* kv : {"key", "value"})
      step[fmt::format("past_key_values.{}.{}", l, kv)] = presents.at(fmt::format("present.{}.{}", l, kv));
  return first;
}

}  // namespace hfx::pipeline
