// The reference side of one export's built-in check, shared between the runtimes it is checked on.
// Each runtime's pass (hfx's reference executor, then ONNX Runtime) asks the same questions of the same
// reference graphs: the checkpoint, the recipe and the seeded step inputs are the same, and so, where
// the runtimes agree, are the greedy tokens teacher-forced on. The first pass keeps its answers here
// and the next reads them, so the reference runs once per export, not once per runtime (issue #21:
// at 0.6B that is one full pass over the weights per shape case and per greedy row).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hfx::pipeline {

class ReferenceMemo {
 public:
  using Tensors = std::map<std::string, Tensor>;
  using Tokens = std::vector<std::vector<int64_t>>;

  // The reference's outputs for `inputs` to the component `role` (`variant` names how its graph was
  // prepared, e.g. with f32 activations), when a pass ran them; inputs compare byte for byte.
  const Tensors* outputs(const std::string& role, const std::string& variant, const Tensors& inputs) const;
  void keep_outputs(const std::string& role, const std::string& variant, const Tensors& inputs, const Tensors& outputs);

  // The reference's greedy tokens for `prompts`, when a pass teacher-forced them on `tokens`.
  std::optional<Tokens> greedy(const std::string& variant, const Tokens& prompts, const Tokens& tokens) const;
  void keep_greedy(const std::string& variant, const Tokens& prompts, const Tokens& tokens, const Tokens& agreed);

 private:
  struct Run {
    std::string role, variant;
    Tensors inputs, outputs;
  };
  struct Greedy {
    std::string variant;
    Tokens prompts, tokens, agreed;
  };
  std::vector<Run> runs_;
  std::vector<Greedy> greedy_;
};

}  // namespace hfx::pipeline
