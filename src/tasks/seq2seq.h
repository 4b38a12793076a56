// The seq2seq-lm task: an encoder-decoder (models/seq2seq.h) as the three graphs Optimum's
// ORTModelForSeq2SeqLM and transformers.js load (reference/peer-contracts.md, section 1.1):
//
//   encoder            encoder_model.onnx
//     input_ids, attention_mask  i64 [batch_size, encoder_sequence_length]
//     -> last_hidden_state       f32 [batch_size, encoder_sequence_length, hidden]
//     (a speech model, Whisper, as ORTModelForSpeechSeq2Seq loads it: input_features f32 [batch_size,
//     mel_bins, frames] -> last_hidden_state [batch_size, frames / 2, hidden], both lengths fixed; its
//     decoder steps read no encoder_attention_mask)
//   decoder            decoder_model.onnx: the first step, which computes the cross-attention state
//     input_ids                  i64 [batch_size, decoder_sequence_length]
//     encoder_attention_mask     i64 [batch_size, encoder_sequence_length]
//     encoder_hidden_states      f32 [batch_size, encoder_sequence_length, hidden]
//     -> logits                  f32 [batch_size, decoder_sequence_length, vocab]
//        present.{i}.decoder.key|value  [batch_size, heads, decoder_sequence_length, head_dim]
//        present.{i}.encoder.key|value  [batch_size, heads, encoder_sequence_length, head_dim]
//   decoder_with_past  decoder_with_past_model.onnx: every later step
//     input_ids, encoder_attention_mask as above
//     past_key_values.{i}.decoder.key|value  [batch_size, heads, past_decoder_sequence_length, head_dim]
//     past_key_values.{i}.encoder.key|value  [batch_size, heads, encoder_sequence_length, head_dim]
//     -> logits, present.{i}.decoder.key|value  [..., total_decoder_sequence_length, ...]
//
// total_decoder_sequence_length = past_decoder_sequence_length + decoder_sequence_length. The
// cross-attention keys/values are StateUpdate::Keep states: the first step returns them, the later
// steps read them unchanged and return none (Optimum's decoder_with_past drops them too).
#pragma once
#include <string>
#include <vector>

#include "models/seq2seq.h"
#include "tasks/causal_lm.h"
#include "tasks/component.h"

namespace hfx::tasks {

// The symbolic dims of the contract above, for --dim.
const std::vector<std::string>& seq2seq_dim_names();

std::vector<Component> build_seq2seq(const models::Seq2SeqLm& model, const CausalLmOptions& options);

// The seq2seq-lm task: needs an encoder-decoder; roles encoder, decoder, decoder_with_past.
const Task& seq2seq_task();

}  // namespace hfx::tasks
