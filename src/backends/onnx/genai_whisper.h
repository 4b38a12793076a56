// onnxruntime-genai's Whisper layout (`--onnx-layout genai`, tasks/seq2seq.h): the genai_config.json
// its WhisperModel loads encoder.onnx and decoder.onnx by (genai 0.18: src/models/whisper.cpp,
// src/config.h; the builder's make_genai_config in builders/whisper.py writes the same fields).
#pragma once

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "ir/model_summary.h"

namespace hfx::onnx_backend {

struct GenaiWhisperInput {
  const io::Checkpoint* checkpoint = nullptr;
  ir::ModelSummary summary;
  int64_t decoder_layers = 0, decoder_heads = 0, head_dim = 0;
  int64_t decoder_start_token_id = 0;
  int64_t context_length = 0;  // max_target_positions: the decoded sequence's longest
  std::string encoder_file = "encoder.onnx", decoder_file = "decoder.onnx";
};

nlohmann::ordered_json genai_whisper_config(const GenaiWhisperInput& in);

// audio_processor_config.json: what genai's multimodal processor (onnxruntime-extensions' audio
// decoder, STFT and log-mel) turns a sound file into audio_features with; the builder's, with Whisper's
// fixed front end (n_fft 400, hop 160, 30 s chunks) and the model's mel bins.
nlohmann::ordered_json genai_whisper_audio_processor(int64_t mel_bins);

}  // namespace hfx::onnx_backend
