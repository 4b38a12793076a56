#include "models/registry.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/bart.h"
#include "models/bert.h"
#include "models/decoder.h"
#include "models/falcon_h1.h"
#include "models/gpt2.h"
#include "models/gpt_neox.h"
#include "models/jamba.h"
#include "models/lfm2.h"
#include "models/mamba.h"
#include "models/mamba2.h"
#include "models/mamba2_hybrid.h"
#include "models/nemotron_h.h"
#include "models/qwen3_5.h"
#include "models/t5.h"
#include "models/zamba2.h"

namespace hfx::models {

namespace {

// The default tasks (tasks/task.h names them too).
constexpr const char* kCausalLm = "causal-lm";
constexpr const char* kFeatureExtraction = "feature-extraction";
constexpr const char* kSeq2SeqLm = "seq2seq-lm";

// A decoder with a file of its own (gpt2.cc, gpt_neox.cc). Not an overload of decoder_entry: a row's
// `{}` traits would pick the function pointer.
ModelEntry own_decoder_entry(std::string type, std::string hf_class, std::string notes,
                             std::unique_ptr<CausalLm> (*make)(const io::Checkpoint&)) {
  return {std::move(type), std::move(hf_class), std::move(notes), kCausalLm, {ModuleKind::Decoder},
          [make](const io::Checkpoint& ckpt) { return Model(make(ckpt)); }};
}

// A row of the shared decoder (decoder.cc), told apart by its traits.
ModelEntry decoder_entry(std::string type, std::string hf_class, std::string notes, DecoderTraits traits) {
  auto cls = hf_class;
  return {std::move(type), std::move(hf_class), std::move(notes), kCausalLm, {ModuleKind::Decoder},
          [traits, cls](const io::Checkpoint& ckpt) { return Model(make_decoder(ckpt, traits, cls)); }};
}

// Feature extraction, and sequence classification when the checkpoint has the head.
ModelEntry encoder_entry(std::string type, std::string hf_class, std::string notes,
                         std::unique_ptr<Encoder> (*make)(const io::Checkpoint&)) {
  return {std::move(type), std::move(hf_class), std::move(notes), kFeatureExtraction, {ModuleKind::Encoder},
          [make](const io::Checkpoint& ckpt) { return Model(make(ckpt)); }};
}

// An encoder-decoder: the seq2seq-lm task's encoder, decoder and decoder_with_past.
ModelEntry seq2seq_entry(std::string type, std::string hf_class, std::string notes,
                         std::unique_ptr<Seq2SeqLm> (*make)(const io::Checkpoint&)) {
  return {std::move(type), std::move(hf_class), std::move(notes), kSeq2SeqLm, {ModuleKind::Seq2Seq},
          [make](const io::Checkpoint& ckpt) { return Model(make(ckpt)); }};
}

}  // namespace

const std::vector<ModelEntry>& model_registry() {
  using Window = DecoderTraits::Window;
  using QkNorm = DecoderTraits::QkNorm;
  using Layout = DecoderTraits::Layout;
  using Mlp = DecoderTraits::Mlp;
  static const std::vector<ModelEntry> entries = {
      decoder_entry("llama", "LlamaForCausalLM", "the base decoder; attention_bias/mlp_bias flags", {}),
      decoder_entry("smollm3", "SmolLM3ForCausalLM",
                    "Llama with NoPE layers (no_rope_layers; every 4th by default) and windows on them per layer_types",
                    {.window = Window::LayerTypes, .window_default = DecoderTraits::WindowDefault::NoRopeLayers,
                     .no_rope = DecoderTraits::NoRope::FromList, .default_tie_word_embeddings = true}),
      decoder_entry("helium", "HeliumForCausalLM", "interleaved (GPT-J style) rotary; attention_bias on q/k/v only",
                    {.default_head_dim = 128, .default_eps = 1e-8, .attention_bias_on_o = false,
                     .rope_interleaved = true}),
      decoder_entry("arcee", "ArceeForCausalLM", "non-gated up/down MLP with relu2 (squared ReLU)",
                    {.mlp = Mlp::Plain, .default_act = "relu2", .plain_mlp_in = "up_proj", .plain_mlp_out = "down_proj"}),
      decoder_entry("nemotron", "NemotronForCausalLM",
                    "LayerNorm1P ((1 + w) LayerNorm with bias); non-gated up/down MLP with relu2; partial rotary (0.5)",
                    {.norm = NormKind::LayerPlusOne, .eps_key = "norm_eps", .default_eps = 1e-5, .mlp = Mlp::Plain,
                     .default_act = "relu2", .rope = {.partial_rotary_factor = 0.5}, .plain_mlp_in = "up_proj",
                     .plain_mlp_out = "down_proj"}),
      decoder_entry("mistral", "MistralForCausalLM", "sliding_window on every layer",
                    {.window = Window::AllLayers}),
      decoder_entry("ministral", "MinistralForCausalLM", "Mistral with the sliding window per layer_types",
                    {.window = Window::LayerTypes, .window_default = DecoderTraits::WindowDefault::AllLayers,
                     .default_sliding_window = 4096}),
      decoder_entry("mixtral", "MixtralForCausalLM",
                    "Mistral with a sparse mixture-of-experts MLP (block_sparse_moe: router, top-k renormalised, w1/w3/w2 experts)",
                    {.window = Window::AllLayers, .moe = DecoderTraits::Moe::Mixtral}),
      decoder_entry("qwen2", "Qwen2ForCausalLM", "q/k/v bias; sliding window per layer_types",
                    {.qkv_bias_always = true, .window = Window::LayerTypes}),
      decoder_entry("qwen2_moe", "Qwen2MoeForCausalLM",
                    "Qwen2 with sparse mixture-of-experts MLPs and a sigmoid-gated shared expert; q/k/v bias (qkv_bias)",
                    {.window = Window::LayerTypes, .attention_bias_key = "qkv_bias", .default_attention_bias = true,
                     .attention_bias_on_o = false, .moe = DecoderTraits::Moe::Qwen, .moe_shared_expert = true}),
      decoder_entry("qwen3", "Qwen3ForCausalLM", "q/k RMSNorm over head_dim; sliding window per layer_types",
                    {.qk_norm = QkNorm::PerHead, .window = Window::LayerTypes}),
      decoder_entry("qwen3_moe", "Qwen3MoeForCausalLM",
                    "Qwen3 with sparse mixture-of-experts MLPs (norm_topk_prob; decoder_sparse_step and mlp_only_layers "
                    "keep dense layers)",
                    {.qk_norm = QkNorm::PerHead, .window = Window::AllLayers, .moe = DecoderTraits::Moe::Qwen}),
      decoder_entry("gemma", "GemmaForCausalLM",
                    "(1 + w) RMSNorm; GeGLU (tanh gelu); embeddings times sqrt(hidden_size)",
                    {.default_head_dim = 256, .norm = NormKind::RmsPlusOne, .default_act = "gelu_pytorch_tanh",
                     .gelu_means_tanh = true, .embed_scale_sqrt_hidden = true}),
      decoder_entry("gemma2", "Gemma2ForCausalLM",
                    "Gemma + sandwich norms, attention and final logit soft-capping, query_pre_attn_scalar, "
                    "sliding window per layer_types",
                    {.window = Window::LayerTypes, .sliding_pattern = 2, .default_head_dim = 256,
                     .default_sliding_window = 4096, .norm = NormKind::RmsPlusOne, .layout = Layout::Sandwich,
                     .act_key = "hidden_activation", .default_act = "gelu_pytorch_tanh",
                     .embed_scale_sqrt_hidden = true, .query_pre_attn_scalar = true, .attn_softcap_default = 50.0,
                     .final_softcap_default = 30.0}),
      decoder_entry("gemma3_text", "Gemma3ForCausalLM",
                    "Gemma 2 without attention soft-capping + (1 + w) q/k norm, local and global rope per layer type",
                    {.qk_norm = QkNorm::PerHead, .window = Window::LayerTypes, .sliding_pattern = 6, .default_head_dim = 256,
                     .default_sliding_window = 4096, .norm = NormKind::RmsPlusOne, .layout = Layout::Sandwich,
                     .act_key = "hidden_activation", .default_act = "gelu_pytorch_tanh",
                     .embed_scale_sqrt_hidden = true, .query_pre_attn_scalar = true, .final_softcap_default = 0.0,
                     .rope_per_layer_type = true}),
      decoder_entry("phi3", "Phi3ForCausalLM",
                    "fused qkv_proj and gate_up_proj; longrope; sliding_window on every layer",
                    {.window = Window::AllLayers, .default_eps = 1e-5, .fused_qkv = true, .mlp = Mlp::GatedFused,
                     .rope = {.yarn_is_longrope = true}}),
      decoder_entry("olmo2", "Olmo2ForCausalLM", "post-norms only; q/k RMSNorm over the whole projection",
                    {.qk_norm = QkNorm::Whole, .default_eps = 1e-5, .layout = Layout::PostNorm}),
      decoder_entry("seed_oss", "SeedOssForCausalLM", "attention_bias on q/k/v, attention_out_bias on o_proj",
                    {.default_head_dim = 128, .attention_bias_on_o = false, .o_bias_key = "attention_out_bias"}),
      decoder_entry("olmo3", "Olmo3ForCausalLM",
                    "OLMo 2 + sliding windows per layer_types (every 4th layer full) and a rope per layer type",
                    {.qk_norm = QkNorm::Whole, .window = Window::LayerTypes, .sliding_pattern = 4, .default_sliding_window = 4096,
                     .default_eps = 1e-5, .layout = Layout::PostNorm, .rope_per_layer_type = true}),
      decoder_entry("exaone4", "Exaone4ForCausalLM",
                    "post-norms; q/k RMSNorm over head_dim; sliding windows per layer_types (every 4th layer full), "
                    "the full layers without rope when the model has a window",
                    {.qk_norm = QkNorm::PerHead, .window = Window::LayerTypes, .sliding_pattern = 4, .default_sliding_window = 4096,
                     .default_eps = 1e-5, .layout = Layout::PostNorm, .no_rope = DecoderTraits::NoRope::FullLayersWhenWindowed}),
      decoder_entry("granite", "GraniteForCausalLM", "embedding, residual and attention multipliers; logits_scaling",
                    {.granite_multipliers = true}),
      decoder_entry("stablelm", "StableLmForCausalLM",
                    "LayerNorm; partial rotary; use_qkv_bias; per-head q/k LayerNorm; optional parallel residual",
                    {.qk_norm = QkNorm::StableLm, .head_dim_in_config = false, .norm = NormKind::Layer,
                     .eps_key = "layer_norm_eps", .default_eps = 1e-5, .attention_bias_key = "use_qkv_bias",
                     .attention_bias_on_o = false, .parallel_residual_in_config = true,
                     .rope = {.partial_rotary_factor = 0.25}}),
      decoder_entry("starcoder2", "Starcoder2ForCausalLM",
                    "LayerNorm with bias; c_fc/c_proj MLP (tanh gelu); use_bias on every projection; sliding window",
                    {.window = Window::AllLayers, .norm = NormKind::Layer, .eps_key = "norm_epsilon", .default_eps = 1e-5,
                     .mlp = Mlp::Plain, .default_act = "gelu_pytorch_tanh", .attention_bias_key = "use_bias",
                     .default_attention_bias = true, .bias_on_mlp = true}),
      decoder_entry("phi", "PhiForCausalLM",
                    "LayerNorm with bias; attention and fc1/fc2 MLP (gelu_new) in parallel on one norm; partial rotary "
                    "(0.5); biases on every projection and on lm_head",
                    {.head_dim_in_config = false, .norm = NormKind::Layer, .eps_key = "layer_norm_eps",
                     .default_eps = 1e-5, .mlp = Mlp::Plain, .default_act = "gelu_new",
                     .rope = {.partial_rotary_factor = 0.5}, .all_biases = true, .parallel_residual_always = true,
                     .o_proj_name = "dense", .plain_mlp_in = "fc1", .plain_mlp_out = "fc2",
                     .final_norm_name = "final_layernorm", .refused_flag = "qk_layernorm"}),
      decoder_entry("glm", "GlmForCausalLM",
                    "fused gate_up_proj; q/k/v bias (attention_bias); partial (0.5) interleaved rotary",
                    {.default_head_dim = 128, .default_eps = 1.5625e-7, .mlp = Mlp::GatedFused,
                     .default_attention_bias = true, .attention_bias_on_o = false,
                     .rope = {.partial_rotary_factor = 0.5}, .rope_interleaved = true}),
      decoder_entry("glm4", "Glm4ForCausalLM",
                    "GLM + sandwich norms (post_self_attn_layernorm, post_attention_layernorm before the MLP, "
                    "post_mlp_layernorm)",
                    {.default_head_dim = 128, .default_eps = 1.5625e-7, .layout = Layout::Sandwich, .mlp = Mlp::GatedFused,
                     .default_attention_bias = true, .attention_bias_on_o = false,
                     .rope = {.partial_rotary_factor = 0.5}, .post_attn_norm_name = "post_self_attn_layernorm",
                     .pre_ffw_norm_name = "post_attention_layernorm", .post_ffw_norm_name = "post_mlp_layernorm",
                     .rope_interleaved = true}),
      decoder_entry("cohere", "CohereForCausalLM",
                    "bias-free LayerNorm; attention and MLP in parallel on one norm; interleaved rotary; logits times "
                    "logit_scale; tied by default (use_qk_norm refused)",
                    {.norm = NormKind::Layer, .eps_key = "layer_norm_eps", .default_eps = 1e-5,
                     .parallel_residual_always = true, .default_tie_word_embeddings = true, .rope_interleaved = true,
                     .layer_norm_bias = false, .logit_scale = true, .refused_flag = "use_qk_norm"}),
      decoder_entry("cohere2", "Cohere2ForCausalLM",
                    "Cohere + sliding windows per layer_types (every 4th layer full) and rope on the sliding layers only",
                    {.window = Window::LayerTypes, .sliding_pattern = 4, .default_sliding_window = 4096, .norm = NormKind::Layer,
                     .eps_key = "layer_norm_eps", .default_eps = 1e-5, .parallel_residual_always = true,
                     .no_rope = DecoderTraits::NoRope::FullLayers, .default_tie_word_embeddings = true,
                     .rope_interleaved = true, .layer_norm_bias = false, .logit_scale = true}),
      own_decoder_entry("gpt2", "GPT2LMHeadModel",
                        "learned positions; LayerNorm; Conv1D [in, out] weights; fused c_attn; gelu_new", make_gpt2),
      own_decoder_entry("gpt_bigcode", "GPTBigCodeForCausalLM",
                        "GPT-2 with Linear weights and multi-query attention (one kv head; per-head q|k|v without "
                        "multi_query)",
                        make_gpt_bigcode),
      own_decoder_entry("gpt_neox", "GPTNeoXForCausalLM",
                        "LayerNorm; per-head fused query_key_value; partial rotary; parallel residual", make_gpt_neox),
      own_decoder_entry("lfm2", "Lfm2ForCausalLM",
                        "hybrid: short-convolution layers (a causal depthwise conv whose last conv_L_cache - 1 inputs "
                        "are carried as past_conv.{i}) and GQA attention layers with q/k RMSNorm, per layer_types",
                        make_lfm2),
      own_decoder_entry("mamba2", "Mamba2ForCausalLM",
                        "state-space: every layer a Mamba-2 mixer (a causal depthwise conv carried as past_conv.{i}, "
                        "the chunked SSD scan carried as past_ssm.{i} [batch, heads, head_dim, state_size], a gated "
                        "group RMSNorm); no attention",
                        make_mamba2),
      own_decoder_entry("mamba", "MambaForCausalLM",
                        "state-space: every layer a Mamba-1 mixer (a causal depthwise conv carried as past_conv.{i}, "
                        "the selective scan carried as past_ssm.{i} [batch, intermediate, state_size]); no attention",
                        make_mamba),
      own_decoder_entry("falcon_mamba", "FalconMambaForCausalLM",
                        "Mamba-1 with weightless RMS norms on the mixer's dt, B and C (mixer_rms_eps)",
                        make_falcon_mamba),
      own_decoder_entry("granitemoehybrid", "GraniteMoeHybridForCausalLM",
                        "hybrid (Granite 4.0-H): Mamba-2 layers (past_conv.{i}, past_ssm.{i}) and GQA attention "
                        "layers scaled by attention_multiplier, rope or none, per layer_types; a shared gated MLP, "
                        "plus a sparse mixture of experts (softmax over the top-k router logits) when "
                        "num_local_experts > 0; embedding/residual multipliers and logits_scaling",
                        make_granitemoehybrid),
      own_decoder_entry("bamba", "BambaForCausalLM",
                        "hybrid: Mamba-2 layers (past_conv.{i}, past_ssm.{i}) and GQA attention layers at "
                        "attn_layer_indices with partial rotary; a Llama MLP after pre_ff_layernorm",
                        make_bamba),
      own_decoder_entry("nemotron_h", "NemotronHForCausalLM",
                        "hybrid (Nemotron-H, dense): one block per layer after its norm, per layers_block_type or "
                        "hybrid_override_pattern: Mamba-2 mixers (past_conv.{i}, past_ssm.{i}), GQA attention with no "
                        "position embedding, a relu2 up/down MLP, or relu2 experts behind a sigmoid router (one expert group); "
                        "lm_head never tied",
                        make_nemotron_h),
      own_decoder_entry("falcon_h1", "FalconH1ForCausalLM",
                        "hybrid (Falcon-H1): every layer a Mamba-2 mixer (past_conv.{i}, past_ssm.{i}; gated RMSNorm "
                        "before or after the gate, or none) and GQA attention with rope (past_key_values.{i}.key|value) "
                        "in parallel on the same normed input, then a SwiGLU MLP; muP multipliers on the embeddings, "
                        "lm_head, both branches' inputs and outputs, the keys, in_proj's z/x/B/C/dt parts and the MLP",
                        make_falcon_h1),
      own_decoder_entry("jamba", "JambaForCausalLM",
                        "hybrid: Mamba-1 layers with RMS norms on dt, B and C (past_conv.{i}, past_ssm.{i}) and GQA "
                        "attention layers without position embedding (attn_layer_period/offset); a sparse MoE "
                        "(softmax router, top-k not renormalised) every expert_layer_period, a Llama MLP elsewhere",
                        make_jamba),
      own_decoder_entry("zamba2", "Zamba2ForCausalLM",
                        "hybrid: Mamba-2 layers (past_conv.{i}, past_ssm.{i}), the \"hybrid\" ones preceded by one of "
                        "num_mem_blocks shared transformer blocks over [hidden, embeddings] (its keys and values "
                        "past_key_values.{i}, LoRA adapters per invocation, optional rope) and a per-layer linear",
                        make_zamba2),
      own_decoder_entry("qwen3_5_text", "Qwen3_5ForCausalLM",
                        "hybrid (Qwen3.5 text): gated delta-net layers (a causal depthwise conv carried as "
                        "past_conv.{i}, the gated delta rule carried as past_recurrent.{i} [batch, value_heads, "
                        "key_head_dim, value_head_dim], a gated RMSNorm) and gated GQA attention layers (sigmoid "
                        "output gate, q/k RMSNorm, partial rotary) per layer_types; (1 + w) RMSNorms",
                        make_qwen3_5_text),
      own_decoder_entry("qwen3_next", "Qwen3NextForCausalLM",
                        "hybrid (Qwen3-Next): Qwen3.5's gated delta-net layers (fused in_proj_qkvz / in_proj_ba "
                        "projections; past_conv.{i}, past_recurrent.{i}) and gated attention layers per layer_types; "
                        "sparse mixture-of-experts MLPs (top-k, norm_topk_prob, a sigmoid-gated shared expert) on the "
                        "decoder_sparse_step layers not in mlp_only_layers, dense MLPs on those; (1 + w) RMSNorms",
                        make_qwen3_next),
      own_decoder_entry("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM",
                        "hybrid (Qwen3.5-MoE text): Qwen3.5's gated delta-net layers (past_conv.{i}, "
                        "past_recurrent.{i}) and gated attention layers per layer_types, every MLP a sparse mixture "
                        "of experts (top-k renormalised, a sigmoid-gated shared expert; experts per expert or "
                        "stacked gate_up_proj / down_proj); (1 + w) RMSNorms",
                        make_qwen3_5_moe_text),
      encoder_entry("bert", "BertModel",
                    "post-norm encoder; token_type_ids input; BertForSequenceClassification head (pooler + classifier)",
                    make_bert),
      encoder_entry("roberta", "RobertaModel",
                    "BERT with position ids from padding_idx + cumsum(input_ids != pad); no token_type_ids input; "
                    "RobertaForSequenceClassification head (dense + tanh + out_proj)",
                    make_roberta),
      encoder_entry("xlm-roberta", "XLMRobertaModel", "the RoBERTa network; XLMRobertaForSequenceClassification head",
                    make_roberta),
      encoder_entry("distilbert", "DistilBertModel",
                    "word + position embeddings, q_lin/k_lin/v_lin/out_lin; DistilBertForSequenceClassification head "
                    "(pre_classifier + relu + classifier)",
                    make_distilbert),
      seq2seq_entry("t5", "T5ForConditionalGeneration",
                    "encoder-decoder: relative position buckets, unscaled attention, relu or gated-gelu feed-forward, "
                    "output scaled by d_model^-0.5 when scale_decoder_outputs",
                    make_t5),
      seq2seq_entry("mt5", "MT5ForConditionalGeneration", "the T5 network, gated-gelu by default, output never scaled",
                    make_mt5),
      seq2seq_entry("bart", "BartForConditionalGeneration",
                    "encoder-decoder: learned positions (offset 2), layernorm_embedding, post-norm LayerNorm layers, "
                    "biased q/k/v/out scaled by head_dim^-0.5, fc1/fc2 MLP, final_logits_bias",
                    make_bart),
      seq2seq_entry("mbart", "MBartForConditionalGeneration",
                    "the BART network pre-norm, with a final layer_norm after each stack; starts from bos_token_id "
                    "without decoder_start_token_id",
                    make_mbart),
      seq2seq_entry("marian", "MarianMTModel",
                    "the BART network with sinusoidal positions and no layernorm_embedding; separate encoder and "
                    "decoder vocabularies (share_encoder_decoder_embeddings false)",
                    make_marian),
      seq2seq_entry("whisper", "WhisperForConditionalGeneration",
                    "speech: log-mel features through conv1/conv2 (stride 2) and saved sinusoidal positions into a "
                    "pre-norm BART encoder with no mask; key projections without bias, learned decoder positions, "
                    "proj_out tied to the decoder's embedding",
                    make_whisper),
  };
  return entries;
}

const ModelEntry* find_model_entry(const std::string& model_type) {
  for (const auto& e : model_registry())
    if (e.model_type == model_type) return &e;
  return nullptr;
}

const ModelEntry& find_model(const std::string& model_type) {
  if (const ModelEntry* e = find_model_entry(model_type)) return *e;
  std::vector<std::string> known;
  for (const auto& e : model_registry()) known.push_back(e.model_type);
  unsupported("model_type `{}` is not supported (supported: {})", model_type, fmt::join(known, ", "));
}

Model load_model(const io::Checkpoint& ckpt) {
  const ModelEntry& e = find_model(ckpt.model_type());
  Model m = with_context(ckpt.config().path.string(), [&] { return e.make(ckpt); });
  HFX_CHECK(m.modules() == e.modules, "{}: the definition exposes other modules than its registry row", e.model_type);
  return m;
}

}  // namespace hfx::models
