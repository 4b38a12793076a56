// Encoder-only models (BERT and its family): one bidirectional pass, no cache. Like CausalLm, a
// definition emits canonical IR for one call and the task (tasks/feature_extraction) owns the I/O.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/model.h"

namespace hfx::models {

struct EncoderInputs {
  ir::ValueId input_ids = ir::kNone;       // i64 [batch, seq]
  ir::ValueId attention_mask = ir::kNone;  // i64 [batch, seq]
  ir::ValueId token_type_ids = ir::kNone;  // i64 [batch, seq]; kNone when the model has no segments
  ir::ValueId input_features = ir::kNone;  // f32 [batch, mel, frames]: a speech encoder's (Whisper) instead of ids
};

struct EncoderOutputs {
  ir::ValueId last_hidden_state = ir::kNone;  // f32 [batch, seq, hidden]
  ir::ValueId logits = ir::kNone;             // f32 [batch, num_labels] when the checkpoint has a head
};

class Encoder {
 public:
  virtual ~Encoder() = default;
  virtual const ModelSummary& summary() const = 0;
  virtual bool uses_token_type_ids() const = 0;
  virtual int64_t num_labels() const = 0;  // 0: no classification head in the checkpoint
  // The longest input its position table covers (the bound a format that plans memory uses).
  virtual int64_t max_sequence_length() const = 0;
  virtual EncoderOutputs build(ir::Builder& b, const EncoderInputs& in) const = 0;
};

}  // namespace hfx::models
