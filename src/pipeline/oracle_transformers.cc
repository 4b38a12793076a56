#include "pipeline/oracle_transformers.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "io/safetensors_write.h"
#include "pipeline/runtime_probe.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

bool is_oracle_name(const std::string& name) { return name == "reference" || name == "transformers" || name == "auto"; }

std::string transformers_oracle_unavailable(const std::string& python) {
  // json ships with every Python: without its version the interpreter itself did not run.
  if (!python_module_version(python, "json")) return fmt::format("{} does not run (set HFX_PYTHON or --python)", python);
  for (const char* module : {"torch", "transformers", "safetensors"})
    if (!python_module_version(python, module))
      return fmt::format("{} has no {} (install torch, transformers and safetensors there, or set HFX_PYTHON)", python,
                         module);
  return "";
}

std::string transformers_oracle_name(const std::string& python) {
  return fmt::format("Transformers {} (torch {}), eager, f32", python_module_version(python, "transformers").value_or("?"),
                     python_module_version(python, "torch").value_or("?"));
}

TransformersOracleResult run_transformers_oracle(const std::string& python, const TransformersOracleJob& job,
                                                 const fs::path& scratch) {
  nlohmann::json j;
  j["model"] = fs::absolute(job.model_dir).string();
  j["hf_class"] = job.hf_class;
  j["layers"] = job.layers;
  j["runs"] = nlohmann::json::array();
  for (size_t i = 0; i < job.runs.size(); ++i) {
    const fs::path in = scratch / fmt::format("oracle-in{}.safetensors", i), out = scratch / fmt::format("oracle-out{}.safetensors", i);
    io::write_safetensors(in, job.runs[i]);
    j["runs"].push_back({{"inputs", in.string()}, {"outputs", out.string()}});
  }
  if (job.generate)
    j["generate"] = {{"prompts", job.prompts}, {"max_new_tokens", job.max_new_tokens},
                     {"eos_token_ids", job.eos_token_ids}, {"pad_token_id", job.pad_token_id}};
  write_text_file(scratch / "oracle-job.json", j.dump());
  const auto result = run_python_job(python, "hfx_transformers_oracle.py", scratch / "oracle-job.json",
                                     scratch / "oracle-result.json",
                                     fmt::format("Transformers (run by {}) failed on {}", python, job.model_dir.string()));
  TransformersOracleResult r;
  for (size_t i = 0; i < job.runs.size(); ++i)
    r.outputs.push_back(io::load_safetensors(scratch / fmt::format("oracle-out{}.safetensors", i)));
  if (job.generate) r.tokens = result.at("generate").at("tokens").get<std::vector<std::vector<int64_t>>>();
  return r;
}

}  // namespace hfx::pipeline
