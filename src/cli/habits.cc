#include "cli/habits.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "cli/usage.h"
#include "io/json_fields.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace hfx::cli {

namespace {

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// Other tools' dtype words -> hfx's --dtype value ("" when `word` is none of them).
std::string hfx_dtype_for(const std::string& word) {
  static const std::array<std::pair<const char*, const char*>, 9> kWords = {{{"fp16", "f16"},
                                                                             {"float16", "f16"},
                                                                             {"half", "f16"},
                                                                             {"f16", "f16"},
                                                                             {"fp32", "f32"},
                                                                             {"float32", "f32"},
                                                                             {"f32", "f32"},
                                                                             {"bf16", "bf16"},
                                                                             {"bfloat16", "bf16"}}};
  const std::string w = lowercase(word);
  for (const auto& [theirs, ours] : kWords)
    if (w == theirs) return ours;
  return "";
}

bool looks_like_model_folder(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

// The hidden second positional would show as "[]" in --help's usage line.
class WithoutHiddenPositional : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = CLI::Formatter::make_usage(app, std::move(name));
    if (const auto at = usage.find(" []"); at != std::string::npos) usage.erase(at, 3);
    return usage;
  }
};

}  // namespace

void add_export_habits(CLI::App& cmd, ExportHabits& h) {
  // group(""): not in --help; they exist only to be answered.
  cmd.formatter(std::make_shared<WithoutHiddenPositional>());
  cmd.add_option("second", h.second_positional)->group("");
  cmd.add_option("--task", h.task)->group("");
  cmd.add_option("--opset", h.opset)->group("");
  cmd.add_flag("--fp16", h.fp16)->group("");
  cmd.add_flag("--trust-remote-code,--trust_remote_code", h.trust_remote_code)->group("");
  cmd.add_option("--cache-dir,--cache_dir", h.cache_dir)->group("");
}

void answer_export_habits(const CLI::App& cmd, const ExportHabits& h, bool model_given, const std::string& out,
                          const std::function<std::optional<fs::path>()>& model_folder) {
  // optimum-cli and transformers.exporters take the model as the first argument.
  if (!h.second_positional.empty()) {
    if (!model_given) usage_error("hfx export takes the model as -m/--model: hfx export -m {} {}", out, h.second_positional);
    if (const std::string dtype = hfx_dtype_for(h.second_positional); !dtype.empty())
      usage_error("`{}` is not an argument of hfx export: the weight dtype is --dtype {}", h.second_positional, dtype);
    usage_error("hfx export takes one output folder, found `{}` and `{}` (the model goes in -m/--model)", out,
                h.second_positional);
  }
  if (!model_given && looks_like_model_folder(out))
    usage_error("hfx export takes the model as -m/--model: hfx export -m {} OUT", out);
  if (cmd.count("--task")) {
    std::optional<fs::path> folder = model_folder();
    const std::string task = folder ? inferred_task(*folder) : "";
    usage_error("hfx export has no --task: the task is inferred from config.json's model_type{}; drop --task {}",
                task.empty() ? "" : " (here " + task + ")", h.task);
  }
  if (cmd.count("--opset")) {
    if (h.opset == "21" || h.opset == "23") usage_error("hfx spells --opset as --onnx-opset: --onnx-opset {}", h.opset);
    usage_error("hfx spells --opset as --onnx-opset, and writes ai.onnx opset 21 (the default) or 23, not {}", h.opset);
  }
  if (h.fp16) usage_error("hfx spells --fp16 as --dtype f16 (Linear layers stored and computed in f16)");
  if (h.trust_remote_code)
    usage_error("hfx never runs code from the model folder (it reads config.json and safetensors only), so there is no "
                "--trust-remote-code; drop it");
  if (cmd.count("--cache-dir"))
    usage_error("hfx has no --cache-dir: it reads the Hugging Face cache at $HF_HUB_CACHE (else $HF_HOME/hub, else "
                "~/.cache/huggingface/hub): HF_HUB_CACHE={} hfx export -m ORG/NAME OUT",
                h.cache_dir);
}

void answer_dtype_spelling(const std::string& dtype) {
  for (const char* accepted : {"f32", "f16", "bf16", "float32", "float16", "bfloat16"})  // quant::parse_dtype's
    if (dtype == accepted) return;
  if (const std::string ours = hfx_dtype_for(dtype); !ours.empty())
    usage_error("--dtype {}: hfx spells it --dtype {}", dtype, ours);
}

std::string inferred_task(const fs::path& folder) {
  try {
    const auto config = io::JsonFile::load(folder / "config.json");
    const auto it = config.json.find("model_type");
    if (it == config.json.end() || !it->is_string()) return "";
    const std::string model_type = it->get<std::string>();
    const models::ModelEntry* entry = models::find_model_entry(model_type);
    if (!entry) return "";
    // The default task, said in the words of optimum's --task.
    if (entry->default_task == "feature-extraction")
      return fmt::format("{}: feature-extraction, with logits when the checkpoint has a classification head", model_type);
    if (entry->default_task == "causal-lm")
      return fmt::format("{}: causal-lm with a KV cache, optimum's text-generation-with-past", model_type);
  } catch (const std::exception&) {
    // a config that cannot be read gets the answer without the task; the export would say why
  }
  return "";
}

}  // namespace hfx::cli
