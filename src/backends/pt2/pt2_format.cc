// The PyTorch program backend as a unit: the IR after decompose-composites-keep-linear-embedding,
// lowered to core-ATen ops and written as a `.pt2` archive (backends/pt2) that torch.export.load reads
// with no pickle; one program per component (pt2/model.pt2, or prefill.pt2 + decode.pt2). The runtime
// is torch itself, through a Python driver (python/hfx_torch_runner.py) over torch.export.load(...).module().
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zip.h>

#include "backends/pt2/pt2_program.h"
#include "backends/pt2/pt2_writer.h"
#include "core/error.h"
#include "core/safe_path.h"
#include "passes/pass.h"
#include "pipeline/backend.h"
#include "pipeline/backend_support.h"
#include "backends/pt2/pt2_runner.h"
#include "pipeline/manifest.h"
#include "pipeline/runtime_probe.h"
#include "runtime/tested_runtimes.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hfx::pipeline {

namespace {

std::string pt2_file(const tasks::Component& c) { return c.file_stem + ".pt2"; }

// models/model.json of an archive, read back (bounded: it is a file anyone may have edited).
json read_program(const fs::path& file) {
  int code = 0;
  zip_t* z = zip_open(file.c_str(), ZIP_RDONLY, &code);
  if (!z) bad_input("{}: not a zip archive (libzip error {})", file.string(), code);
  std::unique_ptr<zip_t, decltype(&zip_discard)> guard(z, zip_discard);
  zip_int64_t found = -1;
  const zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n && found < 0; ++i) {
    const std::string name = zip_get_name(z, zip_uint64_t(i), 0) ? zip_get_name(z, zip_uint64_t(i), 0) : "";
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash + 1) == "models/model.json") found = i;
  }
  if (found < 0) bad_input("{}: no models/model.json (not a torch.export archive)", file.string());
  zip_stat_t st;
  if (zip_stat_index(z, zip_uint64_t(found), 0, &st) < 0 || st.size > kMaxManifestBytes)
    bad_input("{}: models/model.json is larger than {} bytes", file.string(), kMaxManifestBytes);
  std::string text(st.size, '\0');
  zip_file_t* f = zip_fopen_index(z, zip_uint64_t(found), 0);
  if (!f || zip_fread(f, text.data(), st.size) != zip_int64_t(st.size)) {
    if (f) zip_fclose(f);
    bad_input("{}: cannot read models/model.json", file.string());
  }
  zip_fclose(f);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    bad_input("{}: models/model.json: {}", file.string(), e.what());
  }
}

const char* serde_dtype_name(int t) {
  switch (t) {
    case 1: return "u8";
    case 2: return "i8";
    case 3: return "i16";
    case 4: return "i32";
    case 5: return "i64";
    case 6: return "f16";
    case 7: return "f32";
    case 8: return "f64";
    case 12: return "bool";
    case 13: return "bf16";
    default: return "?";
  }
}

// "f32[2,?,64]": a symbolic size (an expression over torch's symbols) is "?".
std::string meta_sig(const json& meta) {
  std::vector<std::string> dims;
  for (const auto& d : meta.value("sizes", json::array()))
    dims.push_back(d.contains("as_int") && d["as_int"].is_number_integer() ? std::to_string(d["as_int"].get<int64_t>()) : "?");
  return fmt::format("{}[{}]", serde_dtype_name(meta.value("dtype", 0)), fmt::join(dims, ","));
}

class Pt2Backend final : public Backend {
 public:
  BackendInfo info() const override {
    BackendInfo i;
    i.name = "pt2";
    i.status = "available (torch.export archive, schema 8.20, core ATen, no pickle)";
    i.files = "pt2/model.pt2 (pt2/prefill.pt2 + decode.pt2 with --split-prefill)";
    i.options = {
        {"--split-prefill, --static-cache, --dim, --dynamic", "",
         "as for onnx; --static-cache: the cache is a user input the program mutates in place (torch's "
         "USER_INPUT_MUTATION), --dim bounds are torch range constraints and runtime asserts"},
    };
    i.runtimes = {"torch"};
    i.tested = fmt::format("torch {} (torch.export.load(...).module(), CPU, f32)", runtime::kTestedTorch);
    return i;
  }

  // pt2 writes f32 only (write_component refuses another precision), so the forms never apply.
  passes::PrecisionTarget precision_target(const Recipe&, const std::string&) const override {
    return passes::PrecisionTarget::Portable;
  }

  std::vector<std::string> passes() const override { return {"decompose-composites-keep-linear-embedding"}; }

  void write_component(const tasks::Component& c, ExportJob& job) const override {
    const quant::PrecisionSpec& precision = job.recipe.precision_for(c.role);
    if (!precision.is_default())
      unsupported("format pt2 writes f32 programs; --dtype/--quantize ({}) are not implemented for it yet: export pt2 "
                  "without them, or in a separate export",
                  precision.str());
    refuse_ssd_scan(c, "pt2");
    std::vector<std::string> passes_run;
    ir::Graph g = with_context(c.role, [&] { return passes::run_pipeline(c.graph, passes(), &passes_run); });
    pt2_backend::Pt2WriteOptions o;
    o.file_name = pt2_file(c);
    o.lowering.shared_buffers = c.shared_buffers;
    auto progress = weight_progress("pt2 " + c.role, g);
    o.on_weight_written = [&](int64_t n, int64_t bytes) { progress->advance(n, bytes); };
    auto written = with_context("pt2 " + c.role, [&] { return pt2_backend::write_pt2(g, job.staging / "pt2", o); });
    progress->finish();
    job.result.add_weight_bytes("pt2", written.weight_bytes);
    job.result.source_bytes_read += written.source_bytes_read;
    job.manifest.add_component(c, "pt2", (fs::path("pt2") / o.file_name).string(), passes_run);
  }

  // Decoders: greedy tokens from torch (torch.export.load(...).module(), f32 CPU) equal the reference
  // executor's, when the driver's Python has torch; otherwise the archive is read back and said unchecked.
  std::string check(ExportJob& job, const ExportOptions& options) const override {
    const LoadedModel& m = job.model;
    const std::string python = driver_python("");  // $HFX_PYTHON, else python3
    const std::string version = torch_version(python);
    const fs::path dir = job.staging / "pt2";
    for (const auto& c : m.components) read_program(dir / pt2_file(c));  // every archive reads back
    if (version.empty())
      return fmt::format("pt2: archives read back; not run ({} has no torch: `hfx verify --runtime torch` with a Python "
                         "that has torch {} checks them)",
                         python, runtime::kTestedTorch);
    if (!m.task->generative())
      return "pt2: archives read back; not run (not a decoder-only model; `hfx verify --runtime torch` checks it)";
    const GreedyCheck done = check_greedy_tokens(
        job, "pt2", "torch", [](const tasks::Component& c) { return c.graph; },
        [&](const tasks::Component& c) {
          std::vector<std::string> names;
          for (const auto& in : c.inputs) names.push_back(in.name);
          return make_torch_runner(dir / pt2_file(c), names, c.shared_buffers, python);
        });
    return fmt::format("pt2: {} greedy tokens x {} rows on torch {} (torch.export.load, CPU, f32) identical to the reference executor",
                       done.tokens, done.rows, version);
  }

  std::unique_ptr<runtime::StepRunner> make_runner(const ArtifactComponent& c, const std::string& rt) const override {
    HFX_CHECK(rt == "torch", "pt2 backend asked for runtime {}", rt);
    return make_torch_runner(c.file, c.declared_inputs, c.shared_buffers, driver_python(""));
  }

  // The program's user inputs and outputs as torch will see them: placeholders in order (named as the
  // manifest names them when they are its names made identifiers), the dict of user outputs, and the
  // in-place updates under the output names their buffers stand for.
  Signature signature(const ArtifactComponent& c) const override {
    const json p = read_program(c.file);
    Signature sig;
    const auto& g = p.at("graph_module").at("graph");
    const auto& specs = p.at("graph_module").at("signature");
    const auto& values = g.at("tensor_values");
    size_t user = 0;
    for (const auto& spec : specs.at("input_specs")) {
      if (!spec.contains("user_input")) continue;
      const std::string ph = spec["user_input"]["arg"]["as_tensor"]["name"].get<std::string>();
      std::string name = ph;
      if (user < c.declared_inputs.size() && pt2_backend::placeholder_name(c.declared_inputs[user]) == ph) name = c.declared_inputs[user];
      ++user;
      sig.inputs.emplace_back(name, values.contains(ph) ? meta_sig(values[ph]) : "?");
    }
    const auto& mcg = p.at("graph_module").at("module_call_graph").at(0).at("signature");
    const json out_spec = json::parse(mcg.at("out_spec").get<std::string>());
    const json keys = json::parse(out_spec.at(1).at("context").get<std::string>());
    size_t k = 0;
    std::map<std::string, std::string> mutated;  // output port -> meta
    for (const auto& spec : specs.at("output_specs")) {
      if (spec.contains("user_input_mutation")) {
        const std::string in = spec["user_input_mutation"]["user_input_name"].get<std::string>();
        const std::string t = spec["user_input_mutation"]["arg"]["name"].get<std::string>();
        for (const auto& [bi, bo] : c.shared_buffers)
          if (pt2_backend::placeholder_name(bi) == in) mutated[bo] = values.contains(t) ? meta_sig(values[t]) : "?";
      } else if (spec.contains("user_output")) {
        const std::string t = spec["user_output"]["arg"]["as_tensor"]["name"].get<std::string>();
        sig.outputs.emplace_back(k < keys.size() ? keys[k].get<std::string>() : t, values.contains(t) ? meta_sig(values[t]) : "?");
        ++k;
      }
    }
    // In the manifest's order: the declared outputs, each a user output or a buffer updated in place.
    Signature ordered{sig.inputs, {}};
    for (const auto& name : c.declared_outputs) {
      if (auto it = mutated.find(name); it != mutated.end()) {
        ordered.outputs.emplace_back(name, it->second);
        continue;
      }
      for (const auto& o : sig.outputs)
        if (o.first == name) ordered.outputs.push_back(o);
    }
    if (ordered.outputs.size() != sig.outputs.size() + mutated.size()) return sig;  // let the comparison show it
    return ordered;
  }

  // The ATen ops the program calls, with their count.
  Placement placement(const ArtifactComponent& c, const std::string& runtime) const override {
    const json p = read_program(c.file);
    Placement out;
    for (const auto& n : p.at("graph_module").at("graph").at("nodes")) out[n.value("target", "?")][runtime]++;
    return out;
  }
};

}  // namespace

HFX_REGISTER_BACKEND(Pt2Backend, 2);

}  // namespace hfx::pipeline
