#include "models/mamba2.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/blocks.h"
#include "models/mamba2_mixer.h"
#include "models/ssm_backbone.h"

namespace hfx::models {

namespace {

struct Mamba2Config {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0;
  double eps = 1e-5;
  bool tie_word_embeddings = false;
  Mamba2MixerSpec mixer;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id, pad_token_id;
};

Mamba2Config parse_mamba2_config(const io::Checkpoint& ckpt) {
  const io::JsonFile& f = ckpt.config();
  const auto& j = f.json;
  Mamba2Config c;
  c.vocab_size = io::require_int(f, j, "vocab_size", 1, int64_t(1) << 26);
  c.hidden_size = io::require_int(f, j, "hidden_size", 1, int64_t(1) << 24);
  c.num_layers = io::require_int(f, j, "num_hidden_layers", 1, 4096);
  c.eps = norm_eps(f, j, "layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = io::optional_bool(f, j, "tie_word_embeddings").value_or(false);
  // Mamba2Config's names and defaults.
  c.mixer = parse_mamba2_mixer(f, c.hidden_size,
                               {.heads = "num_heads", .head_dim = "head_dim", .state_size = "state_size",
                                .groups = "n_groups", .expand = "expand", .conv_kernel = "conv_kernel",
                                .chunk = "chunk_size", .proj_bias = "use_bias", .conv_bias = "use_conv_bias",
                                .eps = "layer_norm_epsilon"},
                               {});
  c.num_heads = c.mixer.heads;
  read_generation_ids(ckpt, c.vocab_size, c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return c;
}

class Mamba2 final : public CausalLm {
 public:
  Mamba2(const io::Checkpoint& ckpt, Mamba2Config cfg) : ckpt_(ckpt), c_(std::move(cfg)) {
    s_ = summary_of(c_, "mamba2", "Mamba2ForCausalLM");
    s_.features = {
        {"layers", fmt::format("{} Mamba-2 mixers", c_.num_layers)},
        {"mixer", c_.mixer.describe()},
        {"tie_word_embeddings", c_.tie_word_embeddings ? "yes" : "no"},
    };
  }

  const ModelSummary& summary() const override { return s_; }
  CacheGeometry cache() const override { return ssm_cache_geometry(c_.num_layers); }

  std::vector<ir::StateSpec> states(const StateLayout& l) const override {
    return hybrid_states(std::vector<bool>(size_t(c_.num_layers), false), 0, 0, l,
                         [&](int64_t i) { return c_.mixer.states(i); });
  }
  std::string_view state_names() const override { return "js-hybrid"; }

  CausalLmOutputs build(ir::Builder& b, const CausalLmInputs& in) const override {
    return build_ssm_backbone(b, ckpt_, in, {c_.vocab_size, c_.hidden_size, c_.num_layers, c_.eps, c_.tie_word_embeddings},
                              [&](ir::Builder& b, const std::string& prefix, ir::ValueId x, ir::ValueId past_conv,
                                  ir::ValueId past_ssm, const std::optional<ir::ValueId>& pad_mask) {
                                Mamba2MixerOut m = mamba2_mixer(b, ckpt_, x, prefix, c_.mixer, past_conv, past_ssm, pad_mask, in);
                                return SsmMixerOut{m.out, m.conv_state, m.ssm_state};
                              });
  }

 private:
  const io::Checkpoint& ckpt_;
  Mamba2Config c_;
  ModelSummary s_;
};

}  // namespace

std::unique_ptr<CausalLm> make_mamba2(const io::Checkpoint& ckpt) {
  return std::make_unique<Mamba2>(ckpt, parse_mamba2_config(ckpt));
}

}  // namespace hfx::models
