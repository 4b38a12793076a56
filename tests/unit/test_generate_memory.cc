// The decode loop's KV cache is sized by an export's manifest, which whoever shipped the export wrote
// (hostile-input report D5): a geometry past the machine's memory is refused before any allocation.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/generate.h"

namespace hfx::runtime {
namespace {

// Never reached: the loop must refuse before its first step.
class NoStep final : public StepRunner {
 public:
  std::vector<std::string> input_names() const override { return {"input_ids"}; }
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>&) override {
    ADD_FAILURE() << "a step ran";
    return {};
  }
};

TEST(GenerateMemory, CacheBeyondAvailableMemoryIsRefusedBeforeAllocating) {
  NoStep step;
  // 4096 layers x 1024 kv heads x 2^24 positions x 1024 head dim: within each field's own range in
  // the manifest schema, and 2^61 bytes together.
  const int64_t len = int64_t(1) << 24;
  CacheSpec cache{tasks::name_states(tasks::kv_cache_states({4096, 1024, 1024, true, len}),
                                     tasks::state_names(tasks::StateNames::Decoder)),
                  true, len};
  SamplingOptions so;
  so.max_new_tokens = 1;
  try {
    generate(step, step, cache, {{1, 2, 3}}, so);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(e.message().find("KV cache would need"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace hfx::runtime
