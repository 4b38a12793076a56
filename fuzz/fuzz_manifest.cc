// The manifest: an export folder whose hfx.json is the input, beside the real files of a tiny export
// (fuzz/data/export/: onnx/, config.json, ...), so a seed manifest checks clean and mutations reach
// the hashing and listing code. Read as `hfx check` (read_manifest, check_export), as `hfx generate`
// and `hfx verify` (open_artifact: components, cache geometry, bounds) and as `hfx export --recipe`
// (Recipe::from_json on the whole manifest).
#include "harness.h"
#include "io/json_fields.h"
#include "pipeline/artifact.h"
#include "pipeline/export.h"
#include "pipeline/manifest.h"

using namespace hfx;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path dir = fuzz::scratch() / "export";
  static bool ready = false;
  if (!ready) {
    fs::copy(fuzz::data_dir() / "export", dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    fs::remove(dir / "hfx.json");
    ready = true;
  }
  fuzz::write_file(dir / "hfx.json", data, size);
  fuzz::expect_user_errors([&] { (void)pipeline::read_manifest(dir); });
  fuzz::expect_user_errors([&] {
    pipeline::CheckReport r = pipeline::check_export(dir);
    HFX_FUZZ_ASSERT(r.files_checked >= 0, "negative count");
  });
  fuzz::expect_user_errors([&] { (void)pipeline::open_artifact(dir, "onnx"); });
  fuzz::expect_user_errors([&] {
    const std::string text(reinterpret_cast<const char*>(data), size);
    io::check_json_depth(text, "hfx.json");
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) (void)pipeline::Recipe::from_json(j, "hfx.json");
  });
  return 0;
}
