// The safetensors header: io::read_safetensors over a memory map of the input (written to a
// scratch file, as the CLI maps a user's file). On success every entry must lie inside the file's
// data section with nbytes == numel * dtype size, and no two non-empty entries may overlap.
#include <algorithm>

#include "core/mapped_file.h"
#include "harness.h"
#include "io/safetensors.h"

using namespace hfx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "input.safetensors";
  fuzz::write_file(path, data, size);
  fuzz::expect_user_errors([&] {
    auto file = MappedFile::open(path);
    io::SafetensorsFile st = io::read_safetensors(file);
    std::vector<std::pair<size_t, size_t>> ranges;
    for (const auto& t : st.tensors) {
      uint64_t numel = 1;
      for (int64_t d : t.shape) {
        HFX_FUZZ_ASSERT(d >= 0, t.name);
        numel *= uint64_t(d);
      }
      HFX_FUZZ_ASSERT(t.nbytes == numel * dtype_size(t.dtype), t.name);
      HFX_FUZZ_ASSERT(t.offset >= 8 && t.offset <= size && t.nbytes <= size - t.offset, t.name);
      // Touch the first and last byte: both must be readable through the map.
      if (t.nbytes > 0) {
        volatile uint8_t sink = t.data()[0] ^ t.data()[t.nbytes - 1];
        (void)sink;
        ranges.emplace_back(t.offset, t.offset + t.nbytes);
      }
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      HFX_FUZZ_ASSERT(ranges[i].first >= ranges[i - 1].second, "overlapping tensors accepted");
    HFX_FUZZ_ASSERT(std::is_sorted(st.tensors.begin(), st.tensors.end(),
                                   [](const auto& a, const auto& b) { return a.name < b.name; }),
                    "tensors not sorted");
  });
  return 0;
}
