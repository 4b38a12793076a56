// The decode loop: prompts in, tokens out, over step graphs (a `decoder` graph, or `prefill` +
// `decode`), with a growing or a static KV cache. Greedy by default; temperature, top-k and top-p
// sampling with a seed. Batches are left-padded and positioned as Transformers' generate() does.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/executor.h"
#include "tasks/state_names.h"

namespace hfx::runtime {

// Runs one step graph on named inputs.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual std::vector<std::string> input_names() const = 0;
  virtual std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) = 0;
  // The state a runner holds itself after its last run (a stateful runtime's variables), by the
  // runtime's own name for each; empty when it holds none or cannot show it.
  virtual std::map<std::string, Tensor> held_state() { return {}; }
  // Forgets the state it holds (a stateful runtime's variables), so that the next run is a first
  // step; nothing for a runner that holds none.
  virtual void start_over() {}
};

// The reference executor as a step runner.
std::unique_ptr<StepRunner> make_executor_runner(const ir::Graph& graph, ExecOptions options = {});

// The state the step graphs carry, as the contract names it (tasks/state_names.h): the loop feeds each
// port's past input and takes back its present output, without knowing what the names spell.
struct CacheSpec {
  std::vector<tasks::StatePort> states;
  bool static_cache = false;
  int64_t max_cache_len = 0;
  // The client name set the ports are named by (a port-like name outside `states` is refused by it).
  const tasks::StateNameSet* names = &tasks::state_names(tasks::StateNames::Decoder);
};

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: off
  double top_p = 1.0;      // 1: off
  uint64_t seed = 0;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = 0;
  // Tokens never picked, and never picked as the first new token (Whisper's suppress_tokens and
  // begin_suppress_tokens, runtime/generation_rules.h; the encoder-decoder loop applies them).
  std::vector<int64_t> suppress_tokens, begin_suppress_tokens;
  // The first new token, and the last one max_new_tokens allows, forced (generation_config.json's
  // forced_bos_token_id, forced_eos_token_id; the encoder-decoder loop applies them).
  std::optional<int64_t> forced_first_token, forced_last_token;
};

// Returns, per prompt, the generated tokens (without the prompt). After a row emits an EOS token it
// is padded with pad_token_id until every row has finished, as Transformers does. `on_token` is
// called for each new token of each row as it is produced (not for the padding).
std::vector<std::vector<int64_t>> generate(StepRunner& first, StepRunner& next, const CacheSpec& cache,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const SamplingOptions& options,
                                           const std::function<void(size_t row, int64_t token)>& on_token = {});

}  // namespace hfx::runtime
