// The ExecuTorch program backend as a unit: one `forward` method, in ExecuTorch's portable kernels
// (and XNNPACK delegates), written natively as `executorch/model.pte`. A decoder's holds its static KV
// cache as mutable buffers; an encoder's is its feature-extraction graph with every dim bounded.
//
// A decoder's contract is the one ExecuTorch's LLM runner and Transformers' ExecutorchExporter use:
// forward(input_ids [1, sequence_length], cache_position [sequence_length]) -> logits
// [1, sequence_length, vocab]; prefill and single steps go through the same method (a symbolic query
// length, DYNAMIC_BOUND up to --dim sequence_length's max, else the cache length). Built from the
// static-cache decoder graph: batch 1, every slot of the attention mask 1 (the causal mask comes from
// cache_position), positions = cache_position; then lowered as the pt2 backend lowers it (core ATen)
// and from there to ExecuTorch kernels (backends/executorch).
//
// An encoder's is the feature-extraction contract (input_ids, attention_mask [, token_type_ids] ->
// last_hidden_state [, logits]) with every dim bounded: batch_size 1 unless --dim gives its bounds,
// sequence_length DYNAMIC_BOUND up to --dim's max, else the model's position table.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/executorch/et_program.h"
#include "backends/executorch/et_reader.h"
#include "backends/executorch/et_writer.h"
#include "backends/pt2/pt2_program.h"
#include "core/error.h"
#include "ir/rewrite.h"
#include "models/encoder.h"
#include "passes/pass.h"
#include "passes/precision.h"
#include "pipeline/backend.h"
#include "pipeline/backend_support.h"
#include "backends/pt2/pt2_runner.h"
#include "pipeline/manifest.h"
#include "pipeline/runtime_probe.h"
#include "pipeline/verify.h"
#include "runtime/tested_runtimes.h"
#ifdef HFX_HAVE_EXECUTORCH_RUNTIME
#include "runtime/executorch/et_runner.h"
#endif

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

constexpr const char* kBatch = "batch_size";
constexpr const char* kSequence = "sequence_length";

bool is_encoder(const tasks::Component& c) { return c.role == "encoder"; }

std::string pte_file(const tasks::Component& c) { return c.file_stem + ".pte"; }

// ExecuTorch's runtime as this build has it: the C++ driver linked against the wheel's libraries, or
// the Python step server over executorch.runtime (`python`) when the build found no wheel.
// `outputs` names the method's outputs in order (the manifest's).
std::unique_ptr<runtime::StepRunner> executorch_runner(const fs::path& pte, const std::vector<std::string>& inputs,
                                                       const std::vector<std::string>& outputs, const std::string& python) {
#ifdef HFX_HAVE_EXECUTORCH_RUNTIME
  (void)python;
  return runtime::make_executorch_cpp_runner(pte, inputs, outputs);
#else
  return make_executorch_runner(pte, inputs, outputs, python);
#endif
}

// The runtime's version, or "" when there is none to run the program.
std::string runtime_version(const std::string& python) {
#ifdef HFX_HAVE_EXECUTORCH_RUNTIME
  (void)python;
  return runtime::executorch_runtime_version() + " (C++ runtime, Module API";
#else
  const std::string v = executorch_version(python);
  return v.empty() ? v : v + " (executorch.runtime";
#endif
}

// The one shape of a component this format writes, or BadInput saying what to ask for.
void check_component(const tasks::Component& c) {
  if (is_encoder(c)) return;
  refuse_ssd_scan(c, "executorch");
  if (c.role != "decoder" && c.role != "prefill" && c.role != "decode")
    unsupported("format executorch writes decoders and encoders, not a {} component: export it as onnx, openvino or pt2", c.role);
  if (c.role != "decoder")
    bad_input("format executorch writes one forward method for prefill and decode steps: drop --split-prefill");
  if (c.shared_buffers.empty())
    bad_input("format executorch holds the KV cache as mutable buffers in the program: add --static-cache --max-cache-len N "
              "(the longest sequence the program runs)");
}

// The program's mutable buffers, (past input, present output) pairs: the key/value cache, written at
// cache_position in place, and a hybrid's replaced state (a conv layer's last columns), copied back
// whole at the end of each step. The LLM runner's forward(input_ids, cache_position) sees neither.
std::vector<std::pair<std::string, std::string>> program_buffers(const tasks::Component& c) {
  auto pairs = c.shared_buffers;
  for (const auto& p : c.state)
    if (p.spec.update == tasks::StateUpdate::Replace) pairs.emplace_back(p.past, p.present);
  return pairs;
}

// f32, f16 and bf16 weights; weight-only int8 per channel (symmetric) in XNNPACK delegates, which
// have f32 x qc8w kernels. XNNPACK's blockwise int4/int8 kernels quantize the activations as well
// (qd8), so they are not weight-only, and the portable kernels have no quantized linear.
void check_precision(const quant::PrecisionSpec& p, const std::string& backend) {
  const auto& q = p.quant;
  if (!q.enabled()) return;
  if (q.bits != 8 || q.block != 0 || !q.symmetric)
    unsupported("format executorch: --quantize {} has no weight-only XNNPACK kernel (XNNPACK's blockwise kernels quantize "
                "the activations too): use --quantize int8:channel, --dtype f16|bf16, or quantize the onnx or openvino format",
                q.str());
  if (backend != "xnnpack")
    unsupported("format executorch: --quantize {} runs in XNNPACK delegates; the portable kernels have no quantized "
                "linear: drop --executorch-backend {}",
                q.str(), backend);
  if (p.quantize_embeddings)
    unsupported("format executorch: --quantize-embeddings (ONNX Runtime's GatherBlockQuantized) has no ExecuTorch form: drop it");
}

// The static-cache decoder graph as ExecuTorch runs it: batch 1, no attention_mask or position_ids
// inputs (all cache slots valid, masked causally by cache_position; positions = cache_position), the
// query length bounded by the cache when --dim gives no max.
ir::Graph executorch_graph(const tasks::Component& c) {
  ir::Graph g = c.graph;
  for (size_t i = 0; i < g.num_values(); ++i)
    for (auto& d : g.value(ir::ValueId(i)).shape)
      if (d.is_symbol() && d.symbol == kBatch) d = Dim::fixed(1);
  if (g.symbols().has(kBatch)) g.symbols().set_bounds(kBatch, SymbolBounds{1, 1});  // what the manifest states
  int64_t slots = 0;
  for (const auto& in : c.inputs)
    if (in.name == "attention_mask" && in.shape.size() == 2 && in.shape[1].is_fixed()) slots = in.shape[1].value;
  HFX_CHECK(slots > 0, "executorch: the static cache's attention_mask has no fixed length");
  if (g.symbols().has("sequence_length")) {
    SymbolBounds b = g.symbols().bounds("sequence_length");
    if (!b.max || *b.max > slots) b.max = slots;
    g.symbols().set_bounds("sequence_length", b);
  }
  const auto mask = g.find("attention_mask"), positions = g.find("position_ids"), cache_position = g.find("cache_position");
  HFX_CHECK(mask && positions && cache_position, "executorch: the static decoder graph lacks attention_mask, position_ids or cache_position");
  ir::Rewriter r(g, {"attention_mask", "position_ids"});
  auto& b = r.builder();
  r.remap(*positions, b.unsqueeze(r.map(*cache_position), {0}));
  r.remap(*mask, b.add1("Expand", {b.i64(1), b.i64s({1, slots})}));
  // A replaced state (a conv layer's columns) is a buffer the runtime keeps from the last sequence; a
  // step at cache_position 0 starts a new one, which reads zeros, as Transformers' fresh cache does
  // (a stale key/value slot needs no such care: the causal mask hides every slot not yet rewritten).
  ir::ValueId continues = ir::kNone;  // f32 [1]: 0 on a sequence's first step, else 1
  for (const auto& p : c.state) {
    if (p.spec.update != tasks::StateUpdate::Replace) continue;
    const auto past = g.find(p.past);
    HFX_CHECK(past, "executorch: the decoder graph lacks the state input {}", p.past);
    if (continues == ir::kNone)
      continues = b.cast(b.add1("Greater", {b.slice(r.map(*cache_position), 0, 1, 0), b.i64s({0})}), DType::F32);
    r.remap(*past, b.times(r.map(*past), continues));
  }
  for (const auto& n : g.nodes()) r.copy(n, r.mapped(n));
  return r.finish();
}

// The encoder graph as ExecuTorch plans it, every dim with an upper bound: batch_size 1 (as the
// decoder's; --dim batch_size=MIN:MAX makes it DYNAMIC_BOUND, N:N fixes it), sequence_length from 1
// (or --dim's min) to --dim's max, else to the longest sequence the model's position table covers
// (memory is planned for the largest shape, and a longer one has no position to read).
ir::Graph executorch_encoder_graph(const tasks::Component& c, int64_t max_positions) {
  ir::Graph g = c.graph;
  auto& symbols = g.symbols();
  SymbolBounds batch = symbols.has(kBatch) ? symbols.bounds(kBatch) : SymbolBounds{};
  SymbolBounds seq = symbols.has(kSequence) ? symbols.bounds(kSequence) : SymbolBounds{};
  if (!batch.max) batch.max = batch.min.value_or(1);  // no max: fixed at the min
  batch.min = batch.min.value_or(1);
  if (seq.max && *seq.max > max_positions)
    bad_input("format executorch: --dim sequence_length max {} is past the {} positions the model's table covers", *seq.max,
              max_positions);
  if (!seq.max) seq.max = max_positions;
  seq.min = seq.min.value_or(1);
  if (*batch.min == *batch.max)  // a fixed batch is a fixed dim, as the decoder's batch 1
    for (size_t i = 0; i < g.num_values(); ++i)
      for (auto& d : g.value(ir::ValueId(i)).shape)
        if (d.is_symbol() && d.symbol == kBatch) d = Dim::fixed(*batch.max);
  symbols.set_bounds(kBatch, batch);
  symbols.set_bounds(kSequence, seq);
  return g;
}

// The graph this format writes for `c`.
ir::Graph executorch_graph(const tasks::Component& c, const LoadedModel& m) {
  return is_encoder(c) ? executorch_encoder_graph(c, m.model.encoder().max_sequence_length()) : executorch_graph(c);
}

tasks::Component executorch_contract(const tasks::Component& c, const ir::Graph& g) {
  tasks::Component e{c.role, c.file_stem, g, {}, {}, {}};
  for (auto id : g.inputs()) {
    const auto& v = g.value(id);
    if (!tasks::find_past(c.state, v.name)) e.inputs.push_back({v.name, v.dtype, v.shape});
  }
  for (auto id : g.outputs()) {
    const auto& v = g.value(id);
    if (!tasks::find_present(c.state, v.name)) e.outputs.push_back({v.name, v.dtype, v.shape});
  }
  return e;
}

// What ExecuTorch's LLM runner reads from the program's constant methods.
// An encoder's program has none (the LLM runner does not run it).
executorch_backend::EtLowerOptions lower_options(const LoadedModel& m, const Recipe& r, const tasks::Component& c, const ir::Graph& g) {
  executorch_backend::EtLowerOptions o;
  o.shared_buffers = program_buffers(c);
  o.xnnpack = r.text_option("executorch_backend") == "xnnpack";
  if (is_encoder(c)) return o;
  int64_t slots = 0, query = 1;
  for (const auto& in : c.inputs)
    if (in.name == "attention_mask") slots = in.shape.at(1).value;
  if (g.symbols().has("sequence_length") && g.symbols().bounds("sequence_length").max) query = *g.symbols().bounds("sequence_length").max;
  const auto& s = m.summary();
  o.metadata = {{"get_max_seq_len", query, false},
                {"get_max_context_len", slots, false},
                {"get_vocab_size", s.vocab_size, false},
                {"use_kv_cache", 1, true},
                {"use_sdpa_with_kv_cache", 0, true},
                {"enable_dynamic_shape", query > 1 ? 1 : 0, true}};
  if (s.bos_token_id) o.metadata.push_back({"get_bos_id", *s.bos_token_id, false});
  o.eos_ids = s.eos_token_ids;
  return o;
}

class ExecuTorchBackend final : public Backend {
  // An encoder's check: verify's first shape cases on the staged export (the manifest's contract,
  // this backend's runner), every output within tolerance of the reference executor.
  static std::string check_encoder(ExportJob& job, const std::string& version, const std::string& kernels) {
    const size_t checks = check_shape_cases(job, "executorch", "executorch", "executorch " + version);
    return fmt::format("executorch: {} checks passed on executorch {}, {}, {}) against the reference executor", checks,
                       version, kernels, job.recipe.precision_for("encoder").str());
  }

 public:
  BackendInfo info() const override {
    BackendInfo i;
    i.name = "executorch";
    i.status = "available (ExecuTorch program ET12, XNNPACK delegate or portable kernels; decoders with a static KV cache as "
               "mutable buffers, encoders)";
    i.files = "executorch/model.pte";
    i.options = {
        {"--static-cache --max-cache-len N", "",
         "required for decoders: the cache is the program's mutable buffers of N slots, updated in place; "
         "forward(input_ids [1, T], cache_position [T]) -> logits, T up to --dim sequence_length's max (else N)"},
        {"--dim batch_size=MIN:MAX, --dim sequence_length=MIN:MAX", "",
         "encoders: the program's bounds (DYNAMIC_BOUND, planned for the max); default batch 1, sequence_length up to the "
         "model's position table"},
    };
    i.runtimes = {"executorch"};
    i.tested = fmt::format("executorch {} (executorch.runtime and the C++ Module API, XNNPACK and portable kernels, CPU, f32, f16 and bf16 weights)",
                           runtime::kTestedExecuTorch);
    return i;
  }

  std::vector<FormatOption> options() const override {
    return {{.field = "executorch_backend",
             .flag = "--executorch-backend",
             .noun = "executorch backend",
             .values = {"xnnpack", "portable"},
             .default_value = "xnnpack",
             .recipe_position = 3,
             .help = "executorch: xnnpack (default: XNNPACK delegates inside the program, one per run of ops XNNPACK "
                     "covers: linear layers, elementwise arithmetic, sigmoid, softmax, the attention matmuls, RMSNorm's "
                     "mean and rsqrt, reshapes, transposes, slices, concatenation; the cache update, embedding, masks "
                     "and gathers in portable kernels) or portable (ExecuTorch's portable kernels only)"}};
  }
  passes::PrecisionTarget precision_target(const Recipe&, const std::string&) const override {
    return passes::PrecisionTarget::ExecuTorch;
  }

  std::vector<std::string> passes() const override { return {"decompose-composites-keep-linear-embedding"}; }

  Plan plan(const tasks::Component& c, const LoadedModel& m, const Recipe& recipe, bool contract) const override {
    refuse_encoder_decoder(m, "executorch");
    check_component(c);  // refused before the work starts
    check_precision(recipe.precision_for(c.role), recipe.text_option("executorch_backend"));
    const std::string kernels = recipe.text_option("executorch_backend") == "xnnpack" ? "XNNPACK partitions" : "portable kernels";
    const bool replaced = program_buffers(c).size() > c.shared_buffers.size();  // a hybrid's conv states too
    Plan p{is_encoder(c)  ? kernels + ", every dim bounded"
           : replaced     ? kernels + ", static KV cache and convolution states as mutable buffers"
                          : kernels + ", static KV cache as mutable buffers",
           {}, {}, {}};
    if (!contract) {
      if (is_encoder(c)) executorch_graph(c, m);  // its bounds are refused before the work starts too
      return p;
    }
    const auto e = executorch_contract(c, executorch_graph(c, m));
    p.inputs = e.inputs;
    p.outputs = e.outputs;
    return p;
  }

  void write_component(const tasks::Component& c, ExportJob& job) const override {
    refuse_encoder_decoder(job.model, "executorch");
    check_component(c);
    const quant::PrecisionSpec& precision = job.recipe.precision_for(c.role);
    const ir::Graph eg = executorch_graph(c, job.model);
    std::vector<std::string> passes_run;
    ir::Graph g = with_context(c.role, [&] { return passes::run_pipeline(eg, passes(), &passes_run); });
    if (!precision.is_default()) {
      g = with_context(c.role, [&] { return passes::apply_precision(g, precision, passes::PrecisionTarget::ExecuTorch); });
      passes_run.push_back("apply-precision");
    }
    pt2_backend::Pt2LowerOptions po;
    po.shared_buffers = program_buffers(c);
    const auto program = with_context("executorch " + c.role, [&] {
      return executorch_backend::lower_to_executorch(pt2_backend::lower_to_pt2(g, po), lower_options(job.model, job.recipe, c, g));
    });
    const fs::path dir = job.staging / "executorch";
    fs::create_directories(dir);
    auto progress = weight_progress("executorch " + c.role, g);
    const auto written = with_context("executorch " + c.role, [&] {
      return executorch_backend::write_pte(program, dir / pte_file(c), [&](int64_t n, int64_t bytes) { progress->advance(n, bytes); });
    });
    progress->finish();
    job.result.add_weight_bytes("executorch", written.constant_bytes);
    job.result.source_bytes_read += written.source_bytes_read;
    const double arena_mib = double(program.arena_bytes) / (1 << 20);
    if (is_encoder(c))
      job.result.notes.push_back(fmt::format("executorch encoder: {} kernels, planned arena {:.1f} MiB (batch {}, sequence_length {})",
                                             program.kernels.size(), arena_mib, eg.symbols().bounds(kBatch).str(),
                                             eg.symbols().bounds(kSequence).str()));
    else
      job.result.notes.push_back(fmt::format("executorch {}: {} kernels, planned arena {:.1f} MiB ({:.1f} MiB of it the cache buffers)", c.role,
                                             program.kernels.size(), arena_mib, double(program.buffer_bytes) / (1 << 20)));
    if (program.xnnpack_calls > 0)
      job.result.notes.push_back(fmt::format("executorch {}: {} XNNPACK delegate calls of {} nodes in all", c.role, program.xnnpack_calls,
                                             program.xnnpack_nodes));
    job.manifest.add_file_digest(fs::path("executorch") / pte_file(c), written.sha256, written.size);
    job.manifest.add_component(executorch_contract(c, eg), "executorch", (fs::path("executorch") / pte_file(c)).string(), passes_run);
  }

  // Decoders: check_tokens greedy tokens from ExecuTorch's runtime (executorch.runtime, portable kernels) equal
  // the reference executor's on the static-cache graph, when the driver's Python has executorch;
  // encoders: the two shape cases `hfx export`'s check runs (as `hfx verify --runtime executorch`)
  // within tolerance of the reference executor; otherwise the program is read back (header,
  // flatbuffer verified against the schema) and said unchecked.
  std::string check(ExportJob& job, const ExportOptions& options) const override {
    const fs::path dir = job.staging / "executorch";
    for (const auto& c : job.model.components) executorch_backend::read_pte_program(dir / pte_file(c));
    const std::string python = driver_python("");
    const std::string version = runtime_version(python);
    if (version.empty())
      return fmt::format("executorch: programs read back; not run ({} has no executorch: `hfx verify --runtime executorch` "
                         "with a Python that has executorch {} checks them)",
                         python, runtime::kTestedExecuTorch);
    const std::string kernels = job.recipe.text_option("executorch_backend") == "xnnpack" ? "XNNPACK" : "portable kernels";
    if (!job.model.task->generative()) return check_encoder(job, version, kernels);
    // One row: the program's batch is 1.
    Recipe one = job.recipe;
    one.task.dims[kBatch] = SymbolBounds{1, 1};
    ExportJob single{job.model, one, job.staging, job.manifest, job.result, job.written};
    const GreedyCheck done = check_greedy_tokens(
        single, "executorch", "executorch",
        [&](const tasks::Component& c) {  // the same weights and forms as the program
          return passes::apply_precision(c.graph, job.recipe.precision_for(c.role), passes::PrecisionTarget::ExecuTorch);
        },
        [&](const tasks::Component& c) {
          const auto e = executorch_contract(c, executorch_graph(c));
          std::vector<std::string> inputs, outputs;
          for (const auto& in : e.inputs) inputs.push_back(in.name);
          for (const auto& out : e.outputs) outputs.push_back(out.name);
          return executorch_runner(dir / pte_file(c), inputs, outputs, python);
        });
    return fmt::format("executorch: {} greedy tokens x {} row on executorch {}, {}, {}) identical to the reference executor",
                       done.tokens, done.rows, version, kernels, job.recipe.precision_for(job.model.components.front().role).str());
  }

  std::unique_ptr<runtime::StepRunner> make_runner(const ArtifactComponent& c, const std::string& rt) const override {
    HFX_CHECK(rt == "executorch", "executorch backend asked for runtime {}", rt);
    return executorch_runner(c.file, c.declared_inputs, c.declared_outputs, driver_python(""));
  }

  // The forward method's ports, named by the manifest (a .pte names none): a DYNAMIC_BOUND tensor's
  // dims are "?" (the program keeps only their upper bounds), a static one's are its sizes.
  Signature signature(const ArtifactComponent& c) const override {
    const auto info = executorch_backend::read_pte_forward(c.file);
    auto ports = [](const std::vector<executorch_backend::EtPort>& ps, const std::vector<std::string>& names) {
      std::vector<std::pair<std::string, std::string>> out;
      for (size_t i = 0; i < ps.size(); ++i) {
        std::vector<std::string> dims;
        for (auto s : ps[i].sizes) dims.push_back(ps[i].dynamic ? "?" : std::to_string(s));
        out.emplace_back(i < names.size() ? names[i] : fmt::format("#{}", i), fmt::format("{}[{}]", ps[i].dtype, fmt::join(dims, ",")));
      }
      return out;
    };
    return {ports(info.inputs, c.declared_inputs), ports(info.outputs, c.declared_outputs)};
  }

  // The kernels the forward method calls, with their count, and the nodes its XNNPACK delegate calls
  // run ("XnnpackBackend: XNNFullyConnected").
  Placement placement(const ArtifactComponent& c, const std::string& runtime) const override {
    Placement out;
    const auto info = executorch_backend::read_pte_forward(c.file);
    for (const auto& [kernel, n] : info.kernels) out[kernel][runtime] = n;
    for (const auto& [node, n] : info.xnnpack_nodes) out["XnnpackBackend: " + node][runtime] = n;
    return out;
  }
};

}  // namespace

HFX_REGISTER_BACKEND(ExecuTorchBackend, 3);

}  // namespace hfx::pipeline
