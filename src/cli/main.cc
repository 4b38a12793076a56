// The `hfx` command. Each subcommand is a thin shell over a pipeline function; every hfx::Error is
// turned into one line on stderr and a non-zero exit here, and nowhere else.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <iostream>

#include "core/error.h"
#include "core/progress.h"
#include "io/safetensors_write.h"
#include "pipeline/export.h"
#include "pipeline/inspect.h"
#include "runtime/executor.h"

namespace fs = std::filesystem;
using namespace hfx;

namespace {

const char* kDescription =
    "hfx turns a Hugging Face checkpoint folder (config.json + *.safetensors) into deployable,\n"
    "checked artifacts, natively in C++. It never runs code from the model folder and never\n"
    "unpickles .bin files.\n\n"
    "Examples:\n"
    "  hfx inspect ./tiny-llama                      # architecture, I/O contract, preflight\n"
    "  hfx export --model ./tiny-llama --format onnx out/tiny-llama\n"
    "  hfx run --model ./tiny-llama --inputs in.safetensors --output logits.safetensors\n";

int cmd_export(const pipeline::ExportOptions& opt) {
  auto r = pipeline::run_export(opt);
  if (!opt.quiet) {
    fmt::print("exported {} in {:.2f} s: {} files, {} of weights\n", r.out_dir.string(), r.seconds, r.files.size(),
               human_bytes(r.weight_bytes_written));
    for (const auto& f : r.files) fmt::print("  {}\n", f.string());
  }
  return 0;
}

struct RunOptions {
  fs::path model_dir, onnx_file, inputs, output;
  bool decomposed = false;
  std::vector<std::string> keep;
};

// Runs the reference executor on a step graph: the checkpoint's own ("eager") or an exported ONNX file.
int cmd_run(const RunOptions& opt) {
  auto inputs = io::load_safetensors(opt.inputs);
  runtime::ExecOptions eo;
  eo.use_composite_kernels = !opt.decomposed;
  eo.keep_values = opt.keep;
  std::map<std::string, Tensor> outputs;
  if (!opt.model_dir.empty()) {
    auto m = pipeline::load_model(opt.model_dir);
    outputs = runtime::Executor(m.graph, eo).run(inputs);
  } else {
    HFX_CHECK(false, "--onnx is handled by the generation issue");
  }
  io::write_safetensors(opt.output, outputs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "hfx"};
  app.set_version_flag("--version", std::string("hfx ") + HFX_VERSION);
  app.require_subcommand(1);

  pipeline::ExportOptions ex;
  auto* exp = app.add_subcommand("export", "Export a checkpoint to one or more formats (atomic: all or nothing).");
  exp->add_option("--model,-m", ex.model_dir, "Checkpoint folder: config.json, model.safetensors or a sharded index")
      ->required()
      ->check(CLI::ExistingDirectory);
  std::string formats = "onnx";
  exp->add_option("--format,-f", formats, "Formats to write, comma separated (onnx)")->capture_default_str();
  exp->add_option("out", ex.out_dir, "Output folder (written to a temporary folder, renamed when complete)")->required();
  exp->add_flag("--overwrite", ex.overwrite, "Replace an existing output folder");
  exp->add_flag("--quiet,-q", ex.quiet, "Print nothing on success");
  exp->footer(
      "Output layout:\n  OUT/onnx/model.onnx + model.onnx_data (weights, 64 KiB aligned)\n"
      "  OUT/config.json, generation_config.json, tokenizer files (also in OUT/onnx/)\n  OUT/hfx.json (manifest)");

  fs::path inspect_dir;
  bool inspect_json = false;
  auto* ins = app.add_subcommand("inspect", "Describe a checkpoint and what an export of it would write.");
  ins->add_option("model", inspect_dir, "Checkpoint folder")->required()->check(CLI::ExistingDirectory);
  ins->add_flag("--json", inspect_json, "Machine-readable output");

  RunOptions run;
  auto* r = app.add_subcommand("run", "Run one step of the model on hfx's CPU reference executor.");
  r->add_option("--model,-m", run.model_dir, "Checkpoint folder (computes eager outputs natively)")
      ->required()
      ->check(CLI::ExistingDirectory);
  r->add_option("--inputs", run.inputs, "safetensors file with input_ids, attention_mask, position_ids, past_key_values.*")
      ->required()
      ->check(CLI::ExistingFile);
  r->add_option("--output,-o", run.output, "safetensors file to write logits and present.* to")->required();
  r->add_flag("--decomposed", run.decomposed, "Run composite ops through their primitive decompositions");
  r->add_option("--keep", run.keep, "Also return these intermediate values (by IR value name)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (*exp) {
      ex.formats.clear();
      for (size_t start = 0; start <= formats.size();) {
        size_t end = formats.find(',', start);
        if (end == std::string::npos) end = formats.size();
        if (end > start) ex.formats.push_back(formats.substr(start, end - start));
        start = end + 1;
      }
      return cmd_export(ex);
    }
    if (*ins) {
      std::cout << pipeline::inspect_report(inspect_dir, inspect_json);
      return 0;
    }
    if (*r) return cmd_run(run);
  } catch (const Error& e) {
    fmt::print(stderr, "hfx: {}: {}\n", error_kind_name(e.kind()), e.describe());
    return e.kind() == ErrorKind::Internal ? 70 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hfx: internal error: {}\n", e.what());
    return 70;
  }
  return 0;
}
