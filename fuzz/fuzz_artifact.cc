// The artifact side: an export folder whose hfx.json is the input, beside the real files of a tiny
// export (fuzz/data/export/) and its source checkpoint (fuzz/data/export-source/; the seeds record it
// as the relative `export-llama`, which the target points at its scratch copy), read the way `hfx verify` reads it
// (verify_export on the reference runtime: checksums, source hashes, signature, numbers, greedy
// tokens; two tokens, two shapes, no re-export) and writes its reports, and the way `hfx generate`
// runs it (open_artifact, the declared-outputs check, a two-token decode under the contract's
// tensor budget). fuzz_manifest covers read_manifest / check_export / Recipe::from_json; this target
// reaches what runs after them, where a manifest field sizes a cache or picks a graph.
#include <algorithm>

#include "harness.h"
#include "io/json_fields.h"
#include "pipeline/artifact.h"
#include "pipeline/report_files.h"
#include "pipeline/verify.h"
#include "runtime/generate.h"

using namespace hfx;
namespace fs = std::filesystem;

namespace {

// scratch/export (the export without its hfx.json) and scratch/export-llama (its source).
fs::path prepare() {
  const fs::path root = fuzz::scratch();
  const auto opts = fs::copy_options::recursive | fs::copy_options::overwrite_existing;
  fs::copy(fuzz::data_dir() / "export", root / "export", opts);
  fs::remove(root / "export" / "hfx.json");
  fs::copy(fuzz::data_dir() / "export-source", root / "export-llama", opts);
  return root / "export";
}

// The input, with a source folder of "export-llama" pointed at the scratch copy (not a chdir: libFuzzer
// reads its corpus by relative paths); anything else is written as it came.
void write_manifest(const fs::path& dir, const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    io::check_json_depth(text, "hfx.json");  // too deep for a recursive parse: hfx refuses it as is
  } catch (const Error&) {
    fuzz::write_file(dir / "hfx.json", text);
    return;
  }
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("source") && j["source"].is_object() && j["source"].contains("folder") &&
      j["source"]["folder"] == "export-llama") {
    j["source"]["folder"] = (fuzz::scratch() / "export-llama").string();
    fuzz::write_file(dir / "hfx.json", j.dump(2));
    return;
  }
  write_manifest(dir, data, size);
}

void run_generate(const fs::path& dir) {
  auto art = pipeline::open_artifact(dir, "onnx");
  for (const auto& c : art.components) pipeline::check_declared_outputs(art, c);
  const bool split = art.components.size() > 1;
  const auto& first_c = art.component(split ? "prefill" : "");
  const std::vector<std::vector<int64_t>> prompts = {{1, 2}};
  runtime::SamplingOptions so;
  so.max_new_tokens = 2;
  so.eos_token_ids = art.eos_token_ids;
  so.pad_token_id = art.pad_token_id;
  const int64_t length = std::max<int64_t>(4, art.cache.static_cache ? art.cache.max_cache_len : 0);
  auto first = runtime::make_executor_runner(first_c.graph, pipeline::artifact_exec_options(first_c, 1, length));
  std::unique_ptr<runtime::StepRunner> next;
  if (split) {
    const auto& c = art.component("decode");
    next = runtime::make_executor_runner(c.graph, pipeline::artifact_exec_options(c, 1, length));
  }
  auto rows = runtime::generate(*first, next ? *next : *first, art.cache, prompts, so);
  HFX_FUZZ_ASSERT(rows.size() == prompts.size(), "one row of tokens per prompt");
  for (const auto& r : rows) HFX_FUZZ_ASSERT(int64_t(r.size()) <= so.max_new_tokens, "more tokens than asked for");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path dir = prepare();
  fuzz::write_file(dir / "hfx.json", data, size);
  fuzz::expect_user_errors([&] {
    pipeline::VerifyOptions o;
    o.tokens = 2;
    o.reexport = false;
    o.full_shape_matrix = false;
    o.reference_weights = "hold";
    const auto report = pipeline::verify_export(dir, o);
    HFX_FUZZ_ASSERT(!report.checks.empty(), "a verify report without checks");
    (void)pipeline::write_reports(report, fuzz::scratch() / "report");
  });
  fuzz::expect_user_errors([&] { run_generate(dir); });
  return 0;
}
