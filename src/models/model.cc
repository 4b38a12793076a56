#include "models/model.h"

#include "core/error.h"
#include "models/encoder.h"
#include "models/seq2seq.h"

namespace hfx::models {

std::vector<ir::StateSpec> CausalLm::states(const StateLayout& l) const {
  const CacheGeometry g = cache();
  return ir::kv_cache_states({g.num_layers, g.num_kv_heads, g.head_dim, l.static_cache, l.max_cache_len}, l.length);
}

std::vector<ir::StateSpec> attention_layer_states(int64_t layer, int64_t kv_heads, int64_t head_dim,
                                                  const StateLayout& l) {
  std::vector<ir::StateSpec> out = ir::kv_cache_states({1, kv_heads, head_dim, l.static_cache, l.max_cache_len}, l.length);
  for (auto& s : out) s.layer = layer;
  return out;
}

std::vector<ir::StateSpec> hybrid_states(const std::vector<bool>& is_attention, int64_t kv_heads, int64_t head_dim,
                                         const StateLayout& l,
                                         const std::function<std::vector<ir::StateSpec>(int64_t)>& own) {
  std::vector<ir::StateSpec> out;
  for (int64_t i = 0; i < int64_t(is_attention.size()); ++i) {
    if (!is_attention[size_t(i)]) {
      for (auto& s : own(i)) out.push_back(s);
      continue;
    }
    for (auto& s : attention_layer_states(i, kv_heads, head_dim, l)) out.push_back(s);
  }
  return out;
}

std::string_view module_name(ModuleKind kind) {
  switch (kind) {
    case ModuleKind::Decoder: return "a decoder";
    case ModuleKind::Encoder: return "an encoder";
    case ModuleKind::Seq2Seq: return "an encoder-decoder";
  }
  return "a module";
}

Model::Model(std::unique_ptr<CausalLm> decoder) : decoder_(std::move(decoder)) { HFX_CHECK(decoder_, "a model without its decoder"); }
Model::Model(std::unique_ptr<Encoder> encoder) : encoder_(std::move(encoder)) { HFX_CHECK(encoder_, "a model without its encoder"); }
Model::Model(std::unique_ptr<Seq2SeqLm> seq2seq) : seq2seq_(std::move(seq2seq)) {
  HFX_CHECK(seq2seq_, "a model without its encoder-decoder");
}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const ModelSummary& Model::summary() const {
  return decoder_ ? decoder_->summary() : encoder_ ? encoder_->summary() : seq2seq_->summary();
}

bool Model::exposes(ModuleKind kind) const {
  switch (kind) {
    case ModuleKind::Decoder: return decoder_ != nullptr;
    case ModuleKind::Encoder: return encoder_ != nullptr;
    case ModuleKind::Seq2Seq: return seq2seq_ != nullptr;
  }
  return false;
}

std::vector<ModuleKind> Model::modules() const {
  std::vector<ModuleKind> out;
  for (ModuleKind k : {ModuleKind::Decoder, ModuleKind::Encoder, ModuleKind::Seq2Seq})
    if (exposes(k)) out.push_back(k);
  return out;
}

const CausalLm& Model::decoder() const {
  HFX_CHECK(decoder_, "{} exposes no decoder", summary().model_type);
  return *decoder_;
}

const Encoder& Model::encoder() const {
  HFX_CHECK(encoder_, "{} exposes no encoder", summary().model_type);
  return *encoder_;
}

const Seq2SeqLm& Model::seq2seq() const {
  HFX_CHECK(seq2seq_, "{} exposes no encoder-decoder", summary().model_type);
  return *seq2seq_;
}

}  // namespace hfx::models
