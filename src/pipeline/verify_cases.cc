#include "pipeline/verify_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
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

std::vector<std::pair<size_t, size_t>> lockstep_groups(const std::vector<int64_t>& sizes, int64_t budget) {
  std::vector<std::pair<size_t, size_t>> groups;
  int64_t held = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (groups.empty() || held + sizes[i] > budget) {
      groups.push_back({i, i});
      held = 0;
    }
    groups.back().second = i + 1;
    held += sizes[i];
  }
  return groups;
}

std::optional<int64_t> bound(const ir::Graph& g, const std::string& sym, bool upper) {
  if (!g.symbols().has(sym)) return std::nullopt;
  const auto& b = g.symbols().bounds(sym);
  return upper ? b.max : b.min;
}

StepBounds step_bounds(const std::map<std::string, SymbolBounds>& dims) {
  StepBounds b;
  auto read = [&](const char* name, int64_t& lo, std::optional<int64_t>& hi) {
    auto it = dims.find(name);
    if (it == dims.end()) return;
    if (it->second.min) lo = *it->second.min;
    hi = it->second.max;
  };
  read("batch_size", b.batch_min, b.batch_max);
  read("sequence_length", b.seq_min, b.seq_max);
  read("past_sequence_length", b.past_min, b.past_max);
  read("total_sequence_length", b.total_min, b.total_max);
  return b;
}

StepBounds step_bounds(const ir::Graph& g) {
  std::map<std::string, SymbolBounds> dims;
  for (const char* name : {"batch_size", "sequence_length", "past_sequence_length", "total_sequence_length"})
    if (g.symbols().has(name)) dims[name] = g.symbols().bounds(name);
  // An encoder-decoder's graphs (tasks/seq2seq.h) name the step's dims for the side they run: the
  // decoder's steps, or the encoder's source.
  const std::pair<const char*, const char*> seq2seq[] = {{"sequence_length", "decoder_sequence_length"},
                                                         {"past_sequence_length", "past_decoder_sequence_length"},
                                                         {"total_sequence_length", "total_decoder_sequence_length"}};
  for (const auto& [ours, theirs] : seq2seq)
    if (g.symbols().has(theirs)) dims[ours] = g.symbols().bounds(theirs);
  if (!g.symbols().has("decoder_sequence_length") && g.symbols().has("encoder_sequence_length"))
    dims["sequence_length"] = g.symbols().bounds("encoder_sequence_length");
  return step_bounds(dims);
}

namespace {

bool takes(const ir::Graph& g, const std::string& name) {
  for (auto id : g.inputs())
    if (g.value(id).name == name) return true;
  return false;
}

// The source length an encoder-decoder's decoder step reads in verify's cases: 6 positions, moved
// inside encoder_sequence_length's bounds.
int64_t encoder_length(const ir::Graph& g) {
  int64_t e = 6;
  if (g.symbols().has("encoder_sequence_length")) {
    const auto& b = g.symbols().bounds("encoder_sequence_length");
    if (b.max) e = std::min(e, *b.max);
    if (b.min) e = std::max(e, *b.min);
  }
  return std::max<int64_t>(1, e);
}

}  // namespace

StepBounds step_bounds(const std::vector<const ir::Graph*>& graphs) {
  StepBounds out;
  auto tighter_max = [](std::optional<int64_t>& a, const std::optional<int64_t>& b) {
    if (b && (!a || *b < *a)) a = b;
  };
  for (const ir::Graph* g : graphs) {
    const StepBounds b = step_bounds(*g);
    out.batch_min = std::max(out.batch_min, b.batch_min);
    out.seq_min = std::max(out.seq_min, b.seq_min);
    out.past_min = std::max(out.past_min, b.past_min);
    out.total_min = std::max(out.total_min, b.total_min);
    tighter_max(out.batch_max, b.batch_max);
    tighter_max(out.seq_max, b.seq_max);
    tighter_max(out.past_max, b.past_max);
    tighter_max(out.total_max, b.total_max);
  }
  return out;
}

std::vector<ShapeCase> shape_matrix(const ir::Graph& g, const std::string& role, const runtime::CacheSpec& cache,
                                    bool full, bool chunked_batches, std::vector<std::string>* skipped) {
  const StepBounds sb = step_bounds(g);
  constexpr int64_t kNone = INT64_MAX / 4;  // "unbounded", with room to add to it
  const int64_t b_lo = std::max<int64_t>(1, sb.batch_min);
  const int64_t b_hi = std::max(b_lo, std::min<int64_t>(4, sb.batch_max.value_or(2)));
  const int64_t s_lo = std::max<int64_t>(1, sb.seq_min);
  int64_t s_hi = std::max(s_lo, std::min<int64_t>(16, sb.seq_max.value_or(8)));
  int64_t total_hi = cache.static_cache ? cache.max_cache_len : std::min<int64_t>(64, sb.total_max.value_or(s_hi + 16));
  if (!cache.static_cache) total_hi = std::max(total_hi, std::min(sb.total_min, sb.total_max.value_or(kNone)));
  if (sb.past_max) total_hi = std::min(total_hi, *sb.past_max + s_hi);
  s_hi = std::max<int64_t>(1, std::min(s_hi, total_hi));
  const int64_t s_mid = std::max<int64_t>(1, (1 + s_hi) / 2);
  const int64_t p_lo = sb.past_min, p_hi = sb.past_max.value_or(kNone);
  const int64_t t_lo = cache.static_cache ? 1 : sb.total_min;
  std::vector<ShapeCase> cases;
  // An encoder has no cache and no decode step (F#17): its cases are named by what they run.
  const std::map<std::string, std::string> encoder_names = {
      {"prompt, batch max", "longest, batch max"},    {"decode, cache partial", "one token, batch min"},
      {"prompt, batch min", "longest, batch min"},    {"chunk, cache partial", "half length"},
      {"decode, cache near full", "one token, batch max"}, {"sequence max, cache near full", "longest, batch min"}};
  // A step with no cache to read: a prefill, an encoder, an encoder-decoder's first decoder step (not
  // its merged decoder, which takes the kept cross state as well). A static cache's first step reads its
  // self-attention buffers, but always from slot 0.
  bool reads_kept = false;
  for (auto id : g.inputs())
    if (const tasks::StatePort* p = tasks::find_past(cache.states, g.value(id).name))
      reads_kept = reads_kept || p->spec.update == tasks::StateUpdate::Keep || !cache.static_cache;
  const bool uncached = role == "prefill" || role == "encoder" || (takes(g, "encoder_hidden_states") && !reads_kept);
  auto add = [&](std::string name, int64_t b, int64_t s, int64_t p) {
    if (role == "encoder" && encoder_names.count(name)) name = encoder_names.at(name);
    if (uncached) p = 0;
    s = role == "decode" ? 1 : std::clamp(s, s_lo, std::max(s_lo, s_hi));
    // The cache length this sequence allows: past's own bounds, and past + s within total's.
    const int64_t lo = uncached ? 0 : std::max(p_lo, t_lo - s);
    const int64_t hi = uncached ? 0 : std::min(p_hi, total_hi - s);
    if (lo > hi) {
      if (skipped)
        skipped->push_back(fmt::format("{} (batch {}, seq {}): no cache length fits the contract's bounds (past [{}, {}], "
                                       "total [{}, {}])", name, b, s, p_lo, p_hi == kNone ? "inf" : std::to_string(p_hi),
                                       t_lo, total_hi));
      return;
    }
    p = std::clamp(p, lo, hi);
    for (const auto& c : cases)
      if (c.batch == b && c.seq == s && c.past == p) return;
    cases.push_back({std::move(name), b, s, p});
  };
  add("prompt, batch max", b_hi, s_hi, 0);
  add("decode, cache partial", b_lo, 1, total_hi / 2);
  if (full) {
    add("prompt, batch min", b_lo, s_hi, 0);
    if (chunked_batches || b_lo == 1)
      add("chunk, cache partial", chunked_batches ? b_hi : 1, s_mid, total_hi / 3);
    else if (skipped)
      skipped->push_back(fmt::format("chunk, cache partial: GroupQueryAttention (the ort profile) runs a chunk on a cache at "
                                     "batch 1 only, and batch_size's min is {}", b_lo));
    add("decode, cache near full", b_hi, 1, total_hi - 1);
    add("sequence max, cache near full", b_lo, s_hi, total_hi - s_hi);
  }
  return cases;
}

std::vector<std::vector<int64_t>> greedy_prompts(const StepBounds& b, const runtime::CacheSpec& cache, int64_t vocab,
                                                 bool batched, int64_t& tokens) {
  int64_t total_max = cache.static_cache ? cache.max_cache_len : b.total_max.value_or(INT64_MAX / 4);
  if (b.past_max) total_max = std::min(total_max, *b.past_max + 1);
  // The prompt step has no cache: its length is within sequence_length and total_sequence_length,
  // leaving room for one more token when the bounds allow it.
  int64_t len = std::min<int64_t>(7, b.seq_max.value_or(7));
  len = std::max<int64_t>(1, std::min(len, total_max - 1));
  len = std::max({len, b.seq_min, cache.static_cache ? int64_t(1) : b.total_min});
  // Each later step feeds one token: a contract whose sequence_length min is above 1 has none.
  tokens = b.seq_min > 1 ? 1 : std::max<int64_t>(1, std::min(tokens, total_max - len));
  const int64_t rows = batched ? std::max(b.batch_min, std::min<int64_t>(2, b.batch_max.value_or(2))) : 1;
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < (r == 0 ? len : std::max<int64_t>(1, len - 3 * r)); ++i)
      prompts[size_t(r)].push_back(3 + (i * (37 + 16 * r) + 11 * r) % std::max<int64_t>(1, vocab - 3));
  return prompts;
}

std::map<std::string, Tensor> own_inputs(const ir::Graph& g, std::map<std::string, Tensor> in) {
  std::map<std::string, Tensor> out;
  for (auto id : g.inputs())
    if (auto it = in.find(g.value(id).name); it != in.end()) out.emplace(it->first, std::move(it->second));
  return out;
}

std::map<std::string, Tensor> make_inputs(const ir::Graph& g, const ShapeCase& c, const runtime::CacheSpec& cache,
                                          int64_t vocab, uint64_t seed, bool padding_in_past_only) {
  std::mt19937_64 rng(seed);
  std::map<std::string, Tensor> in;
  const int64_t B = c.batch, S = c.seq, P = c.past, T = P + S;
  std::set<std::string> wanted;
  for (auto id : g.inputs()) wanted.insert(g.value(id).name);
  bool carries_state = false;
  for (const auto& p : cache.states) carries_state = carries_state || wanted.count(p.past);
  for (auto id : g.outputs()) carries_state = carries_state || tasks::find_present(cache.states, g.value(id).name);
  const bool decoder = wanted.count("position_ids") || carries_state;
  // A static cache's decoder masks its whole buffer; an encoder (an encoder-decoder's) its tokens.
  const int64_t mask_len = cache.static_cache && decoder ? cache.max_cache_len : T;
  // A decoder without position_ids (the onnx ort profile, its split prefill too) keeps each row's keys
  // from position 0 in its cache (GroupQueryAttention's own format), so the cases fed a cache the
  // reference made use unpadded rows; its padded rows are checked by the greedy generation.
  const bool left_pad = wanted.count("position_ids") || !decoder;
  std::vector<int64_t> ids(size_t(B * S)), pos(size_t(B * S)), mask(size_t(B * mask_len), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pad = left_pad ? std::min<int64_t>(2 * b, padding_in_past_only ? P : T - 1) : 0;
    int64_t count = 0;
    for (int64_t j = 0; j < T; ++j) {
      const bool real = j >= pad;
      mask[size_t(b * mask_len + j)] = real;
      count += real;
      if (j >= P) pos[size_t(b * S + j - P)] = real ? count - 1 : 1;
    }
    for (int64_t i = 0; i < S; ++i) ids[size_t(b * S + i)] = int64_t(rng() % uint64_t(vocab));
  }
  // A speech encoder (Whisper's) reads its features only.
  // (onnxruntime-genai's names them audio_features.)
  const bool speech_encoder = wanted.count("input_features") > 0 || wanted.count("audio_features") > 0;
  if (!speech_encoder) in["input_ids"] = i64s({B, S}, ids);
  // genai's Whisper decoder reads int32 ids.
  for (auto id : g.inputs())
    if (g.value(id).name == "input_ids" && g.value(id).dtype == DType::I32)
      in["input_ids"] = Tensor::from_vector<int32_t>(DType::I32, {B, S}, std::vector<int32_t>(ids.begin(), ids.end()));
  // An encoder-decoder's decoder step (it reads the source: its encoder's output or the cross state
  // kept from it) reads no positions nor a mask of its own tokens (causal, all real).
  bool seq2seq_step = wanted.count("encoder_hidden_states") > 0;
  for (const auto& p : cache.states)
    seq2seq_step = seq2seq_step || (p.spec.update == tasks::StateUpdate::Keep && wanted.count(p.past));
  // The reference graph reads position_ids even when the artifact does not (onnx ort profile);
  // run() hands each graph only its own inputs.
  if (decoder && !seq2seq_step && !speech_encoder) in["position_ids"] = i64s({B, S}, pos);
  if (!seq2seq_step && !speech_encoder) in["attention_mask"] = i64s({B, mask_len}, mask);
  if (wanted.count("token_type_ids")) {
    std::vector<int64_t> types(static_cast<size_t>(B * S));
    for (int64_t i = 0; i < B * S; ++i) types[size_t(i)] = (i % S) >= S / 2;  // two segments
    in["token_type_ids"] = i64s({B, S}, types);
  }
  std::normal_distribution<float> normal(0.f, 1.f);
  // An encoder-decoder's decoder step reads a source of E positions, row b right-padded by 2b (as its
  // tokenizers pad): its mask, and the encoder's output (a first step) or the cross-attention state.
  const int64_t E = encoder_length(g);
  if (wanted.count("encoder_attention_mask")) {
    std::vector<int64_t> source(size_t(B * E), 1);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = E - std::min<int64_t>(2 * b, E - 1); j < E; ++j) source[size_t(b * E + j)] = 0;
    in["encoder_attention_mask"] = i64s({B, E}, source);
  }
  // Random f32 for `name`, whose non-batch dims are fixed in the graph (`length` for a symbolic one).
  auto random_input = [&](const std::string& name, int64_t length) {
    std::vector<int64_t> dims = {B};
    for (auto id : g.inputs())
      if (g.value(id).name == name)
        for (size_t i = 1; i < g.value(id).shape.size(); ++i)
          dims.push_back(g.value(id).shape[i].is_fixed() ? g.value(id).shape[i].value : length);
    Tensor t(DType::F32, dims);
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = normal(rng);
    in[name] = std::move(t);
  };
  if (wanted.count("encoder_hidden_states")) random_input("encoder_hidden_states", E);
  // A speech encoder's log-mel features (Whisper's: every dim but the batch fixed).
  for (const char* name : {"input_features", "audio_features"})
    if (wanted.count(name)) random_input(name, E);
  // The merged decoder's first step (no past) reads an empty cross state and computes it: its
  // use_cache_branch is false then, as Optimum and transformers.js feed it.
  const bool merged_first = P == 0 && wanted.count("encoder_hidden_states");
  if (wanted.count("use_cache_branch")) {
    Tensor flag(DType::Bool, {1});
    flag.data()[0] = !merged_first;
    in["use_cache_branch"] = std::move(flag);
  }
  for (auto id : g.inputs()) {
    const std::string& name = g.value(id).name;
    const tasks::StatePort* port = tasks::find_past(cache.states, name);
    if (!port) continue;
    const bool keep = port->spec.update == tasks::StateUpdate::Keep;
    const int64_t length = keep ? (merged_first ? 0 : E) : cache.static_cache ? cache.max_cache_len : P;
    Tensor t(port->spec.dtype, tasks::state_dims(port->spec, B, length));
    HFX_CHECK(t.dtype() == DType::F32, "state {} is {}: verify's random states are f32", name, dtype_name(t.dtype()));
    // A replaced state (a convolution's) before any token is zeros, as a runtime that keeps it (the
    // OpenVINO stateful decoder) starts it; after a past it is random like a cache.
    if (P > 0 || port->spec.update != tasks::StateUpdate::Replace) {
      float* p = t.as<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(rng);
    }
    in[name] = std::move(t);
  }
  if (cache.static_cache && decoder) {
    std::vector<int64_t> cp(static_cast<size_t>(S));
    for (int64_t i = 0; i < S; ++i) cp[size_t(i)] = P + i;
    in["cache_position"] = i64s({S}, cp);
  }
  return in;
}

// A case for an artifact that keeps its cache as state (OpenVINO's stateful decoder): the cache is
// filled by really running the first `past` tokens. Returns the inputs of that first step (nullopt
// when past is 0) and sets `step` to the second step's inputs, whose state inputs are the
// reference's state outputs after the first step (replaced by the state the artifact's runtime held,
// where it shows it: verify.cc's start_from_held_state), so the reference runs the step as the state
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
  // An encoder-decoder's merged decoder reads neither (its steps are causal over real tokens).
  const bool positions = whole.count("position_ids") > 0, masked = whole.count("attention_mask") > 0;
  if (positions) first["position_ids"] = columns(whole.at("position_ids"), 0, P);
  if (cache.static_cache) {
    // The static cache's mask covers every slot: the first run sees the first P of them filled.
    Tensor mask = whole.at("attention_mask");
    int64_t* m = mask.as<int64_t>();
    for (int64_t b = 0; b < mask.dim(0); ++b)
      for (int64_t j = P; j < mask.dim(1); ++j) m[b * mask.dim(1) + j] = 0;
    first["attention_mask"] = std::move(mask);
    std::vector<int64_t> cp(static_cast<size_t>(P)), rest(static_cast<size_t>(T - P));
    std::iota(cp.begin(), cp.end(), 0);
    std::iota(rest.begin(), rest.end(), P);
    first["cache_position"] = i64s({P}, cp);
    whole["cache_position"] = i64s({T - P}, rest);
  } else if (masked) {
    first["attention_mask"] = columns(whole.at("attention_mask"), 0, P);
  }
  auto presents = runtime::Executor(ref).run(first);
  step = whole;
  step["input_ids"] = columns(whole.at("input_ids"), P, T);
  if (positions) step["position_ids"] = columns(whole.at("position_ids"), P, T);
  for (const auto& p : cache.states) step[p.past] = presents.at(p.present);
  // The merged decoder's step after the first reads its carried cross state.
  if (auto flag = step.find("use_cache_branch"); flag != step.end()) flag->second.data()[0] = 1;
  return first;
}

std::string diagnose_divergence(const std::vector<OutputDiff>& outputs, const std::vector<LayerDiff>& layers, double atol,
                                const std::vector<tasks::StatePort>& states) {
  // NaN counts as over tolerance (a NaN difference is never "within").
  auto over = [&](double e) { return !(e <= atol); };
  std::vector<std::string> differ, caches;
  bool logits = false;
  for (const auto& o : outputs) {
    if (!over(o.max_abs)) continue;
    differ.push_back(o.name);
    if (o.name == "logits") logits = true;
    if (tasks::find_present(states, o.name)) caches.push_back(o.name);
  }
  std::string what = differ.empty() ? "no output is over tolerance"
                                    : fmt::format("over tolerance: {}", fmt::join(differ, ", "));
  if (layers.empty()) return what + "; layer outputs are not exposed by this graph";
  for (size_t i = 0; i < layers.size(); ++i)
    if (over(layers[i].max_abs))
      return fmt::format("{}; first diverging layer: {} (max abs {:.3g}, mean abs {:.3g})", what, i, layers[i].max_abs,
                         layers[i].mean_abs);
  // Every layer's output agrees, the last one's included.
  if (!caches.empty())
    return fmt::format("{}; every layer's output agrees, so the difference is in the cache {} writes (its key/value "
                       "projection, rope or cache update), not in the final norm or lm_head",
                       what, caches.size() == 1 ? caches[0] : fmt::format("{} and {} more", caches[0], caches.size() - 1));
  if (logits) return what + "; every layer's output agrees, the last one's included: the difference is in the final norm or lm_head";
  return what + "; every layer's output agrees";
}

// Whether every symbolic dim of `in` lies within the bounds `g` declares: a bounded contract (say
// sequence_length 1:8) cannot take prompt + generated tokens in one pass, though it decodes them.
static bool within_bounds(const ir::Graph& g, const std::map<std::string, Tensor>& in) {
  for (auto id : g.inputs()) {
    const auto& v = g.value(id);
    auto it = in.find(v.name);
    if (it == in.end() || it->second.rank() != int64_t(v.shape.size())) continue;
    for (size_t d = 0; d < v.shape.size(); ++d)
      if (v.shape[d].is_symbol() && !g.symbols().admits(v.shape[d].symbol, it->second.shape()[d])) return false;
  }
  return true;
}

std::optional<TeacherForcing> teacher_forcing(const ir::Graph& first, const runtime::CacheSpec& cache, int64_t vocab,
                                              const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<std::vector<int64_t>>& tokens,
                                              const runtime::SamplingOptions& sampling) {
  if (sampling.temperature > 0 || tokens.size() != prompts.size() || tokens.empty()) return std::nullopt;
  const size_t steps = tokens.front().size();
  // Each row's real tokens: up to and including its first EOS; generate() pads it after that, and
  // stops once every row has ended or max_new_tokens are out.
  auto is_eos = [&](int64_t t) {
    return std::find(sampling.eos_token_ids.begin(), sampling.eos_token_ids.end(), t) != sampling.eos_token_ids.end();
  };
  TeacherForcing tf;
  tf.real.resize(tokens.size());
  bool all_ended = true;
  size_t longest = 0;
  for (size_t b = 0; b < tokens.size(); ++b) {
    const auto& row = tokens[b];
    if (row.size() != steps) return std::nullopt;
    tf.real[b] = size_t(std::find_if(row.begin(), row.end(), is_eos) - row.begin());
    const bool ended = tf.real[b] < row.size();
    if (ended) ++tf.real[b];  // the EOS is the row's last real token
    for (size_t i = tf.real[b]; i < row.size(); ++i)
      if (row[i] != sampling.pad_token_id) return std::nullopt;
    all_ended = all_ended && ended;
    longest = std::max(longest, tf.real[b]);
  }
  if (steps != size_t(sampling.max_new_tokens) && !(all_ended && steps == longest)) return std::nullopt;
  for (size_t b = 0; b < tokens.size(); ++b) {
    if (tf.real[b] == 0) continue;
    std::vector<int64_t> ids = prompts[b];
    ids.insert(ids.end(), tokens[b].begin(), tokens[b].begin() + long(tf.real[b] - 1));
    const int64_t T = int64_t(ids.size());
    auto in = make_inputs(first, {"teacher forcing", 1, T, 0}, cache, vocab, 0);  // one unpadded row, empty cache
    in["input_ids"] = Tensor::from_vector<int64_t>(DType::I64, {1, T}, ids);
    if (!within_bounds(first, in)) return std::nullopt;  // decoded step by step instead
    tf.rows.push_back(b);
    tf.inputs.push_back(own_inputs(first, std::move(in)));
    tf.lengths.push_back(T);
  }
  return tf;
}

std::optional<std::vector<std::vector<int64_t>>> teacher_forced_tokens(
    const TeacherForcing& tf, const std::vector<std::map<std::string, Tensor>>& outputs, int64_t vocab,
    const std::vector<std::vector<int64_t>>& prompts, const std::vector<std::vector<int64_t>>& tokens) {
  HFX_CHECK(outputs.size() == tf.rows.size(), "teacher forcing: {} outputs for {} rows", outputs.size(), tf.rows.size());
  for (size_t i = 0; i < tf.rows.size(); ++i) {
    const size_t b = tf.rows[i];
    const Tensor& logits = outputs[i].at("logits");
    if (logits.numel() != tf.lengths[i] * vocab) return std::nullopt;  // a graph that returns the last position only
    for (size_t j = 0; j < tf.real[b]; ++j) {
      const float* scores = logits.as<float>() + (int64_t(prompts[b].size()) - 1 + int64_t(j)) * vocab;
      if (int64_t(std::max_element(scores, scores + vocab) - scores) != tokens[b][j]) return std::nullopt;  // first max, as generate()
    }
  }
  return tokens;
}

}  // namespace hfx::pipeline
