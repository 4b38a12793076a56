// A `.pte` read back (an export anyone may have edited): its header and program flatbuffer checked,
// and what `hfx verify` compares with the manifest: the forward method's ports and the kernels it calls.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace hfx::executorch_backend {

// The flatbuffer part of a .pte (bytes before its segments) with the extended header taken out, as
// flatc wrote it: identifier ET12, the eh00 header's sizes within the file, and the flatbuffer
// verified against program.fbs. BadInput naming the file otherwise.
std::string read_pte_program(const std::filesystem::path& file);

struct EtPort {
  std::string dtype;            // hfx's name ("f32", "i64")
  std::vector<int64_t> sizes;   // upper bounds when dynamic
  bool dynamic = false;         // DYNAMIC_BOUND
};
struct EtMethodInfo {
  std::vector<EtPort> inputs, outputs;
  std::map<std::string, int> kernels;  // "aten::mm.out" or "XnnpackBackend (delegate)" -> calls
  // The nodes the XNNPACK delegate calls run, over the calls: "XNNFullyConnected" -> count.
  std::map<std::string, int> xnnpack_nodes;
  std::vector<std::string> methods;    // every method of the program
};
// The forward method of a .pte. BadInput when the program has none or its ports are not tensors.
EtMethodInfo read_pte_forward(const std::filesystem::path& file);

}  // namespace hfx::executorch_backend
