// The manifest: pipeline::read_manifest and check_export on an export folder whose hfx.json is the
// input, beside real files of a tiny export (fuzz/data/export/: onnx/, config.json, ...), so a
// seed manifest checks clean and mutations reach the hashing and listing code.
#include "harness.h"
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
  return 0;
}
