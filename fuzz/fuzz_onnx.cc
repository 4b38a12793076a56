// ONNX read-back: onnx_backend::read_onnx on the input as model.onnx, beside the valid weights file
// of a tiny export (fuzz/data/export/onnx/model.onnx_data) that the seed graphs reference.
#include "backends/onnx/onnx_reader.h"
#include "harness.h"

using namespace hfx;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path dir = fuzz::scratch() / "onnx";
  static bool ready = false;
  if (!ready) {
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(fuzz::data_dir() / "export" / "onnx"))
      if (e.path().extension() == ".onnx_data")
        fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
    ready = true;
  }
  fuzz::write_file(dir / "model.onnx", data, size);
  fuzz::expect_user_errors([&] { (void)onnx_backend::read_onnx(dir / "model.onnx"); });
  return 0;
}
