// Encoder-decoder models (T5, BART and its family, Whisper): an encoder run once over the source, and
// a decoder whose steps attend to their own growing cache and to the encoder's output through
// cross-attention keys/values that the first step computes and every later step reads unchanged.
// Like CausalLm, a definition emits canonical IR for one call and the task (tasks/seq2seq) owns the
// I/O contract: the names, the component split and the state ports.
#pragma once
#include <optional>
#include <vector>

#include "ir/builder.h"
#include "models/encoder.h"
#include "models/model.h"

namespace hfx::models {

// What the encoder reads: a text model's token ids and their padding mask (which every decoder step
// reads too, as encoder_attention_mask), or a speech model's log-mel features (Whisper's: unmasked and
// of one fixed length, the only one its encoder accepts, which its convolutional stem halves).
struct Seq2SeqSource {
  bool speech = false;
  int64_t mel_bins = 0;        // input_features [batch, mel_bins, frames]
  int64_t frames = 0;
  int64_t encoder_length = 0;  // last_hidden_state's length (frames / 2)
};

// Inputs of one decoder step, created by the task.
struct Seq2SeqDecoderInputs {
  ir::ValueId input_ids = ir::kNone;               // i64 [batch, seq]: the decoder's tokens
  ir::ValueId encoder_attention_mask = ir::kNone;  // i64 [batch, enc]: a text source's padding
  // f32 [batch, enc, hidden]: the encoder's output, read by a first step (cross keys/values computed
  // from it); kNone for a step that reads the cross keys/values carried from the first.
  ir::ValueId encoder_hidden_states = ir::kNone;
  // Per layer [batch, heads, past, head_dim]; empty for a first step (no self-attention past). With a
  // static cache, buffers [batch, heads, max_cache_len, head_dim] that every step reads, the first too.
  std::vector<ir::ValueId> past_key, past_value;
  // i64 [seq]: a static cache's slots for this step's tokens (their positions); kNone when growing.
  ir::ValueId cache_position = ir::kNone;
  // Per layer [batch, heads, enc, head_dim]; empty when encoder_hidden_states is given. Given with
  // encoder_hidden_states too (the merged decoder), they are empty on the first step ([.., 0, ..]) and
  // used as they are after it: kept_or_computed.
  std::vector<ir::ValueId> cross_key, cross_value;
};

struct Seq2SeqDecoderOutputs {
  ir::ValueId logits = ir::kNone;  // f32 [batch, seq, vocab]
  std::vector<ir::ValueId> present_key, present_value;  // per layer, the self-attention cache after this step
  std::vector<ir::ValueId> cross_key, cross_value;      // per layer, when computed (a first step)
};

// The merged decoder's cross-attention keys/values without a branch: `kept` ([b, h, 0 or enc, d], the
// carried state, empty on the first step) when it holds any, else `computed` ([b, h, enc, d], from
// encoder_hidden_states): the first enc rows of Concat(kept, computed) along the length axis. Optimum
// and transformers.js feed an empty past on the first step (use_cache_branch false).
ir::ValueId kept_or_computed(ir::Builder& b, ir::ValueId kept, ir::ValueId computed);

// A decoder step's positions: its tokens' (past .. past + seq, the past length read from the first past
// key's shape, 0 for a first step) and every key's (0 .. past + seq), i64 1-D. With a static cache:
// cache_position and every slot of the buffer (0 .. max_cache_len); the causal mask hides the slots
// not yet written, which lie past every query.
struct StepPositions {
  ir::ValueId queries = ir::kNone, keys = ir::kNone;
};
StepPositions step_positions(ir::Builder& b, const Seq2SeqDecoderInputs& in);
// key position - query position, i64 [queries, keys].
ir::ValueId relative_positions(ir::Builder& b, const StepPositions& p);
// The causal mask added to `bias` ([.., queries, keys]): a later key gets the lowest f32, as Transformers'
// eager mask adds it. Without a bias, the mask alone as [1, 1, queries, keys].
ir::ValueId causal_bias(ir::Builder& b, const StepPositions& p, ir::ValueId bias = ir::kNone);
// Layer `layer`'s self-attention keys or values after this step: the past ones (when the step has a
// past) followed by this step's, or a static buffer with this step's written at cache_position.
ir::ValueId update_self_cache(ir::Builder& b, const Seq2SeqDecoderInputs& in, const std::vector<ir::ValueId>& past,
                              int64_t layer, ir::ValueId now);

// The longest source and decoded sequence a model's position tables index (none: unbounded, T5's
// relative positions).
struct PositionLimits {
  std::optional<int64_t> source, target;
};

class Seq2SeqLm {
 public:
  virtual ~Seq2SeqLm() = default;
  virtual const ModelSummary& summary() const = 0;
  // The token every decoded sequence starts from (config.json's decoder_start_token_id).
  virtual int64_t decoder_start_token_id() const = 0;
  // The decoder's layers and its attention geometry (self and cross alike).
  virtual int64_t decoder_layers() const = 0;
  virtual int64_t heads() const = 0;
  virtual int64_t head_dim() const = 0;
  virtual PositionLimits position_limits() const { return {}; }
  // What the encoder reads (token ids unless a speech model says otherwise).
  virtual Seq2SeqSource source() const { return {}; }
  // The encoder over input_ids and attention_mask (or input_features): last_hidden_state only.
  virtual ir::ValueId encode(ir::Builder& b, const EncoderInputs& in) const = 0;
  virtual Seq2SeqDecoderOutputs decode(ir::Builder& b, const Seq2SeqDecoderInputs& in) const = 0;
  // Every decoder layer's cross-attention keys and values [batch, heads, enc, head_dim] from the
  // encoder's output, the projections a first step makes (onnxruntime-genai's Whisper encoder returns
  // them, so its decoder never reads encoder_hidden_states). Unsupported for a model without them.
  struct CrossState {
    std::vector<ir::ValueId> key, value;
  };
  virtual CrossState cross_state(ir::Builder& b, ir::ValueId encoder_hidden_states) const;
};

}  // namespace hfx::models
