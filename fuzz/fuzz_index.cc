// The sharded index: model.safetensors.index.json fuzzed, beside a valid tiny llama config.json and
// its two valid shards (fuzz/data/index/). On success every tensor must come from a shard inside the
// folder, and the model must load as for an export.
#include "harness.h"
#include "pipeline/export.h"

using namespace hfx;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path dir = fuzz::scratch() / "model";
  static bool ready = false;
  if (!ready) {
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(fuzz::data_dir() / "index"))
      if (e.path().extension() != ".json" || e.path().filename() == "config.json")
        fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
    ready = true;
  }
  fuzz::write_file(dir / "model.safetensors.index.json", data, size);
  fuzz::expect_user_errors([&] {
    pipeline::LoadedModel m = pipeline::load_model(dir);
    const fs::path root = fs::canonical(dir);
    for (const auto& f : m.checkpoint->weight_files())
      HFX_FUZZ_ASSERT(fs::canonical(f).parent_path() == root, f.string());
  });
  return 0;
}
