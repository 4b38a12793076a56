// `hfx export`, `hfx inspect`, `hfx check`.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/format_flags.h"
#include "cli/habits.h"
#include "cli/model_source.h"
#include "cli/usage.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "io/json_fields.h"
#include "pipeline/export.h"
#include "pipeline/inspect.h"
#include "pipeline/manifest.h"
#include "tasks/causal_lm.h"
#include "tasks/state_names.h"

namespace fs = std::filesystem;

namespace hfx::cli {

namespace {

// "NAME=MIN:MAX", either side may be empty: "batch_size=1:8", "sequence_length=:512".
std::pair<std::string, SymbolBounds> parse_dim(const std::string& text) {
  const auto eq = text.find('='), colon = text.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || colon == std::string::npos)
    bad_input("--dim {}: expected NAME=MIN:MAX (e.g. batch_size=1:8)", text);
  auto num = [&](const std::string& s) -> std::optional<int64_t> {
    if (s.empty()) return std::nullopt;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (...) {
    }
    if (used != s.size() || v < 0) bad_input("--dim {}: \"{}\" is not a non-negative integer", text, s);
    return v;
  };
  return {text.substr(0, eq), SymbolBounds{num(text.substr(eq + 1, colon - eq - 1)), num(text.substr(colon + 1))}};
}

// `hfx export`'s options as parsed.
struct State {
  pipeline::ExportOptions opt;
  std::string model, revision;  // as given: a folder or a Hub id
  ExportHabits habits;
  std::string formats = "onnx";
  std::vector<std::string> dims;
  fs::path recipe;
  bool quiet = false, verbose = false;
  bool split = false, static_cache = false, dynamic = false;
  int64_t max_cache_len = 0;
  std::string dtype = "f32", quantize;
  bool quantize_lm_head = false, quantize_embeddings = false;
  FormatFlags format_flags;  // each format's own options (--onnx-profile, --stateless, ...)
};

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

// The recipe the flags describe. Every check here is of the command line itself: exit 2 (cli/usage.h).
pipeline::Recipe recipe_from_flags(const State& s, const CLI::App& cmd) {
  pipeline::Recipe r;
  r.formats.clear();
  for (const auto& f : split_commas(s.formats)) r.formats.push_back(lowercase(f));  // `--format ONNX` is onnx
  answer_dtype_spelling(s.dtype);
  as_usage([&] {
    r.precision.dtype = quant::parse_dtype(s.dtype);
    r.precision.quant = quant::QuantSpec::parse(s.quantize);
  });
  r.precision.quantize_lm_head = s.quantize_lm_head;
  r.precision.quantize_embeddings = s.quantize_embeddings;
  if (s.quantize_lm_head && !r.precision.quant.enabled()) usage_error("--quantize-lm-head needs --quantize");
  if (s.quantize_embeddings && !r.precision.quant.enabled()) usage_error("--quantize-embeddings needs --quantize");
  // F#11: a number that means nothing is refused, not read as "unset".
  if (cmd.count("--max-cache-len") && s.max_cache_len < 1)
    usage_error("--max-cache-len {}: expected a positive number of tokens (the static cache's length)", s.max_cache_len);
  r.task.split_prefill = s.split;
  r.task.static_cache = s.static_cache;
  r.task.max_cache_len = s.max_cache_len;
  r.task.dynamic = s.dynamic;
  std::map<std::string, std::string> dim_given;  // name -> the --dim text, to name both of a duplicate
  for (const auto& d : s.dims) {
    auto [name, b] = as_usage([&] { return parse_dim(d); });
    if (auto [it, fresh] = dim_given.emplace(name, d); !fresh)
      usage_error("--dim {} is given twice ({} and {}): give each dim once", name, it->second, d);
    r.task.dims[name] = b;
  }
  as_usage([&] {
    tasks::validate(r.task);  // unknown dims, contradictory bounds, --max-cache-len without --static-cache
  });
  r.options = format_settings(cmd, s.format_flags);
  return r;
}

// F#13: an option of a format that is not written changes nothing; say so rather than ignore it.
void note_options_that_do_not_apply(const State& s, const CLI::App& cmd, const std::vector<std::string>& formats) {
  note_format_flags_not_applying(cmd, formats);
  // The built-in check's ONNX Runtime and Transformers runs read the ONNX files.
  const bool onnx = std::find(formats.begin(), formats.end(), "onnx") != formats.end();
  for (const char* flag : {"--verify-runtime", "--verify-oracle"})
    if (cmd.count(flag) && !onnx) fmt::print(stderr, "hfx: note: {} only applies to --format onnx; ignored\n", flag);
  if (cmd.count("--verify-runtime") && !s.opt.verify)
    fmt::print(stderr, "hfx: note: --verify-runtime chooses the built-in check's runtime, which --no-verify skips; ignored\n");
  if (cmd.count("--verify-oracle") && !s.opt.verify)
    fmt::print(stderr, "hfx: note: --verify-oracle chooses the built-in check's oracle, which --no-verify skips; ignored\n");
}

}  // namespace

void register_export(CLI::App& app, Action& action) {
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("export", "Export a checkpoint to one or more formats (atomic: all or nothing).");
  cmd->add_option("--model,-m", s->model,
                  "Checkpoint folder (config.json + model.safetensors or a sharded index), or a Hub id ORG/NAME read "
                  "offline from the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else "
                  "~/.cache/huggingface/hub); a folder that exists wins over a Hub id");
  cmd->add_option("--revision", s->revision,
                  "With a Hub id: a branch or tag of the cache's refs/, or a commit hash of its snapshots/ (default main)");
  cmd->add_option("out", s->opt.out_dir, "Output folder (built in a temporary folder, renamed when complete)")->required();
  cmd->add_option("--format,-f", s->formats,
                  "Formats to write, comma separated, any case (onnx, openvino; `hfx formats` lists them)")
      ->capture_default_str();
  add_format_flags(*cmd, s->format_flags);
  cmd->add_option("--dtype", s->dtype,
                  "Weight dtype: f32, f16 (Linear layers compute in f16), bf16 (stored bf16, cast to f32 at use)")
      ->capture_default_str();
  cmd->add_option("--quantize", s->quantize,
                  "Weight-only quantization of Linear layers: int4 (blocks of 32) | int8 (blocks of 128), options "
                  ":block=N (16..256) :sym|:asym :accuracy=0..4 (MatMulNBits accuracy_level; 4 = int8 activations, faster on ORT CPU), int8:channel (per channel, DequantizeLinear); e.g. int4:block=64:asym. "
                  "onnx portable profile: blocked DequantizeLinear + MatMul; --onnx-profile ort: MatMulNBits; openvino: "
                  "compressed u4/i4/u8/i8 weights "
                  "(docs/quantization.md)");
  cmd->add_flag("--quantize-lm-head", s->quantize_lm_head, "Quantize lm_head too (default: kept in --dtype)");
  cmd->add_flag("--quantize-embeddings", s->quantize_embeddings,
                "Quantize the embedding tables too (blockwise schemes; onnx ort profile: GatherBlockQuantized; openvino: "
                "a Gather over compressed weights; with --quantize-lm-head a tied lm_head reads the same bytes; default: "
                "kept in --dtype)");
  cmd->add_flag("--split-prefill", s->split, "Write a prefill graph and a decode graph (query length 1) instead of one");
  cmd->add_flag("--static-cache", s->static_cache, "Fixed-length KV buffers written in place (needs --max-cache-len)");
  cmd->add_option("--max-cache-len", s->max_cache_len, "Length N of the static cache buffers");
  cmd->add_option("--dim", s->dims, "Bound a dim: NAME=MIN:MAX (batch_size, sequence_length, past_sequence_length, "
                                    "total_sequence_length; an encoder-decoder's encoder_sequence_length, "
                                    "decoder_sequence_length, past_decoder_sequence_length, "
                                    "total_decoder_sequence_length); repeatable")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--dynamic", s->dynamic, "All dims symbolic and unbounded (no contract bounds)");
  cmd->add_option("--recipe", s->recipe, "Take the options from a recipe JSON or an export's hfx.json (reproduces it)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--overwrite", s->opt.overwrite,
                "Replace OUT when it is a previous hfx export (never the model folder, a folder holding or inside it, "
                "another folder or a file)");
  cmd->add_flag("--no-verify", [s](int64_t) { s->opt.verify = false; },
                "Skip the built-in check before the export is published (on ONNX Runtime when found, else on "
                "the reference executor)");
  cmd->add_flag("--quiet,-q", s->quiet, "Print nothing on success");
  cmd->add_flag("--verbose,-v", s->verbose, "Also list the files written and the checkpoint bytes the writers read");
  cmd->add_option("--verify-runtime", s->opt.verify_runtime,
                  "Where the built-in check runs the files: onnxruntime (ONNX Runtime, the runtime they are for; the "
                  "default whenever $HFX_PYTHON, else python3, imports onnxruntime) or reference (hfx's reference "
                  "executor); either is compared with the reference executor on the checkpoint")
      ->check(CLI::IsMember({"onnxruntime", "reference"}));
  cmd->add_option("--verify-oracle", s->opt.verify_oracle,
                  "What the built-in check compares the files with: reference (hfx's reference executor on hfx's own "
                  "definition) | transformers (also Transformers eager on the checkpoint; an error when $HFX_PYTHON, "
                  "else python3, lacks torch or transformers) | auto (transformers when it runs, else a note)")
      ->check(CLI::IsMember({"reference", "transformers", "auto"}))
      ->capture_default_str();
  add_export_habits(*cmd, s->habits);
  cmd->footer(
      "Output layout:\n"
      "  OUT/onnx/model.onnx + model.onnx_data   one decoder graph (or prefill.onnx + decode.onnx, both reading\n"
      "                                          prefill.onnx_data: each weight stored once)\n"
      "  OUT/openvino/openvino_model.xml + .bin  OpenVINO IR (--format openvino; stateful KV cache unless --stateless)\n"
      "  OUT/config.json, generation_config.json, tokenizer files (also in OUT/onnx/)\n"
      "  OUT/hfx.json                            manifest: recipe, components, contract, checksums\n"
      "hfx infers the task from config.json (no --task), spells optimum's --opset as --onnx-opset and fp16 as\n"
      "--dtype f16, and never downloads: `hf download ORG/NAME` fills the cache -m ORG/NAME reads.");
  cmd->callback([s, cmd, &action] {
    action = [s, cmd] {
      auto& o = s->opt;
      const bool model_given = cmd->count("--model") > 0;
      const std::optional<std::string> revision = cmd->count("--revision") ? std::optional(s->revision) : std::nullopt;
      answer_export_habits(*cmd, s->habits, model_given, o.out_dir.string(), [&]() -> std::optional<fs::path> {
        try {
          return resolve_model_source(s->model, revision).folder;
        } catch (const std::exception&) {
          return std::nullopt;  // the answer then goes without the task; the export would say what is wrong
        }
      });
      if (revision && !model_given) usage_error("--revision {} needs -m ORG/NAME, a Hub id in the Hugging Face cache", *revision);
      if (!s->recipe.empty()) {
        // A recipe fixes every option that shapes the output; flags on top would make it lie.
        for (const char* flag : {"--format", "--split-prefill", "--static-cache", "--max-cache-len", "--dim", "--dynamic",
                                 "--dtype", "--quantize", "--quantize-lm-head", "--quantize-embeddings"})
          if (cmd->count(flag)) usage_error("{} cannot be combined with --recipe (the recipe fixes it)", flag);
        for (const auto* o : format_flags_given(*cmd))
          usage_error("{} cannot be combined with --recipe (the recipe fixes it)", o->flag);
        const std::string text = read_text_file(s->recipe, kMaxManifestBytes);  // a recipe may be an hfx.json
        io::check_json_depth(text, s->recipe.string());  // printing a 100000-deep value would overflow the stack
        const auto j = nlohmann::json::parse(text, nullptr, false);
        if (j.is_discarded()) bad_input("{}: not valid JSON", s->recipe.string());
        o.recipe = pipeline::Recipe::from_json(j, s->recipe.string());
        // An export's source: source.path, relative to the folder of its hfx.json; an older one's source.folder.
        if (!model_given && j.contains("source") && j["source"].is_object()) {
          const auto& src = j["source"];
          if (src.contains("path") && src["path"].is_string() && !fs::path(src["path"].get<std::string>()).is_absolute())
            o.model_dir = fs::absolute(s->recipe).parent_path() / src["path"].get<std::string>();
          else if (src.contains("folder") && src["folder"].is_string())
            o.model_dir = src["folder"].get<std::string>();
        }
      } else {
        o.recipe = recipe_from_flags(*s, *cmd);
        note_options_that_do_not_apply(*s, *cmd, o.recipe.formats);
      }
      if (model_given) {
        ModelSource source = resolve_model_source(s->model, revision);
        o.model_dir = source.folder;
        o.hub = std::move(source.hub);
      }
      if (o.model_dir.empty() && s->recipe.empty()) usage_error("--model is required (or a --recipe taken from an export's hfx.json)");
      if (o.model_dir.empty())
        bad_input("--model is required: {} has no source folder (a relative path at source.path, or source.folder) to export", s->recipe.string());
      o.model_dir = fs::absolute(o.model_dir).lexically_normal();
      o.out_dir = normalize_output_path(o.out_dir);  // D14: `newout/` is `newout`, never a folder inside it
      if (o.hub && !s->quiet)
        fmt::print("{} at {} (commit {}) from the Hugging Face cache: {}\n", o.hub->repo_id, o.hub->revision,
                   o.hub->commit, o.model_dir.string());
      // What will be written, and any choice made on the user's behalf, before the work (F#19).
      o.on_plan = [&](const pipeline::ExportPlan& plan) {
        if (!s->quiet)
          fmt::print("exporting {} ({}) to {}: {}\n", plan.model_type, plan.task, o.out_dir.string(),
                     fmt::join(plan.components, ", "));
        for (const auto& note : plan.notes) fmt::print(stderr, "hfx: note: {}\n", note);
        std::fflush(stdout);
      };
      auto r = pipeline::run_export(o);
      for (const auto& note : r.notes) fmt::print(stderr, "hfx: note: {}\n", note);
      if (!s->quiet) {
        // Weight bytes per format: the tensors as stored, not the files (whose 64 KiB alignment makes
        // a tiny int4 export look as large as its f32 one, F#20).
        std::vector<std::string> sizes;
        for (const auto& [format, bytes] : r.weight_bytes) sizes.push_back(fmt::format("{} {}", format, human_bytes(bytes)));
        fmt::print("exported {} in {:.2f} s: {} files{}; weights {}\n", r.out_dir.string(), r.seconds, r.files.size(),
                   s->verbose ? "" : " (-v lists them)", fmt::join(sizes, ", "));
        if (s->verbose) {
          for (const auto& f : r.files) fmt::print("  {}\n", f.string());
          // Each checkpoint weight is read once however many formats are written (ir/written_weights.h).
          if (r.source_weight_bytes > 0)
            fmt::print("read {} bytes of checkpoint weights for {} bytes in the checkpoint ({:.2f}x)\n", r.source_bytes_read,
                       r.source_weight_bytes, double(r.source_bytes_read) / double(r.source_weight_bytes));
        }
        if (!r.verify_summary.empty()) fmt::print("{}\n", r.verify_summary);
      }
      return 0;
    };
  });
}

void register_inspect(CLI::App& app, Action& action) {
  struct InspectState {
    fs::path dir;
    bool json = false;
    std::string format = "onnx";
    FormatFlags format_flags;
    pipeline::InspectOptions options;
  };
  auto s = std::make_shared<InspectState>();
  auto* cmd = app.add_subcommand("inspect", "Describe a checkpoint and what an export of it would write.");
  cmd->add_option("model", s->dir, "Checkpoint folder")->required()->check(CLI::ExistingDirectory);
  cmd->add_flag("--json", s->json, "Machine-readable output");
  cmd->add_option("--format,-f", s->format, "The format whose I/O contract is shown (onnx, openvino, pt2; as `hfx export`)")
      ->capture_default_str();
  add_format_flags(*cmd, s->format_flags, /*contract_only=*/true);
  cmd->add_flag("--static-cache", s->options.task.static_cache,
                "The static-cache contract, as `hfx export --static-cache` writes it (executorch needs it)");
  cmd->add_option("--max-cache-len", s->options.task.max_cache_len, "With --static-cache: the cache length N");
  cmd->callback([s, cmd, &action] {
    action = [s, cmd] {
      const auto formats = split_commas(s->format);
      if (formats.size() != 1) usage_error("--format {}: inspect shows the contract of one format at a time", s->format);
      s->options.format = lowercase(formats[0]);
      // F#13's habit: an option of another format changes nothing here either.
      note_format_flags_not_applying(*cmd, {s->options.format});
      s->options.options = format_settings(*cmd, s->format_flags);
      std::cout << pipeline::inspect_report(s->dir, s->json, s->options);
      return 0;
    };
  });
}

void register_check(CLI::App& app, Action& action) {
  auto dir = std::make_shared<fs::path>();
  auto* cmd = app.add_subcommand("check", "Re-verify an export against its manifest (every file's sha256).");
  auto allow_extra = std::make_shared<bool>(false);
  cmd->add_option("out", *dir, "Export folder")->required();
  cmd->add_flag("--allow-extra", *allow_extra,
                "Files hfx did not write (a model card, README.md) may sit beside the export; listed, not a problem");
  cmd->footer("Prints every problem it finds, one a line on stderr, and exits 1 when there is any.");
  cmd->callback([dir, allow_extra, &action] {
    action = [dir, allow_extra] {
      std::error_code ec;  // a symlink loop or an unreadable parent: one line, not exit 70 (D16)
      if (!fs::is_directory(*dir, ec))
        bad_input("{}: no such export folder{}", dir->string(), ec ? " (" + ec.message() + ")" : std::string());
      auto r = pipeline::check_export(*dir, *allow_extra);
      if (!r.problems.empty()) {
        for (const auto& p : r.problems) fmt::print(stderr, "hfx: check: {}: {}\n", dir->string(), p);
        if (r.problems.size() > 1) fmt::print(stderr, "hfx: check: {}: {} problems\n", dir->string(), r.problems.size());
        return 1;
      }
      fmt::print("{}: ok ({} files match the manifest{})\n", dir->string(), r.files_checked,
                 r.extras.empty() ? std::string() : fmt::format("; {} extra allowed: {}", r.extras.size(), fmt::join(r.extras, ", ")));
      return 0;
    };
  });
}

}  // namespace hfx::cli
