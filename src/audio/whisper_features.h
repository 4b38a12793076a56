// Whisper's log-mel input features, as Transformers 5.23's `WhisperFeatureExtractor(**preprocessor_config)
// (raw, sampling_rate=16000, return_tensors="np")["input_features"][0]` computes them with its default
// arguments and torch installed (`_torch_extract_fbank_features`):
//   1. the samples cut to, or padded on the right with padding_value to, n_samples = chunk_length *
//      sampling_rate;
//   2. the power spectrogram (stft.h: centred, reflect-padded, periodic Hann, n_fft, hop_length),
//      its last frame dropped: nb_max_frames = n_samples / hop_length frames;
//   3. the Slaney mel filter bank (mel_filter_bank.h: feature_size filters, 0 to 8000 Hz, its weights
//      rounded to f32 as torch holds them) applied to each frame;
//   4. log10 of max(mel, 1e-10); everything below the maximum - 8 raised to it; (x + 4) / 4.
// Steps 2-4 run in double and round to f32 at the log, where torch's values are f32; the last two
// steps are then torch's own f32 arithmetic. docs/audio.md says how close that is to Transformers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace hfx::audio {

// The fields of preprocessor_config.json the features depend on; absent fields take the extractor's
// defaults (the values below).
struct WhisperFeatureConfig {
  int feature_size = 80;    // mel filters: 80, or 128 for large-v3
  int sampling_rate = 16000;
  int hop_length = 160;
  int chunk_length = 30;    // seconds per window
  int n_fft = 400;
  float padding_value = 0.0f;

  int64_t n_samples() const { return int64_t(chunk_length) * sampling_rate; }
  int64_t nb_max_frames() const { return n_samples() / hop_length; }
};

// BadInput naming the file and field for a value out of range; for "dither" other than 0 (Gaussian
// noise from torch's generator: no two runs agree, so there is nothing to reproduce); for
// "n_samples" or "nb_max_frames" that differ from the values the extractor derives (it derives them
// and ignores the file's); for a "feature_extractor_type" other than WhisperFeatureExtractor.
WhisperFeatureConfig read_whisper_feature_config(const std::filesystem::path& preprocessor_config);

struct LogMel {
  int64_t n_mels = 0;
  int64_t n_frames = 0;       // nb_max_frames
  std::vector<float> values;  // [n_mels, n_frames], row-major: input_features[0]
  // Frames that hold audio rather than padding: ceil(min(n, n_samples) / hop_length), the ones that
  // `return_attention_mask=True` marks.
  int64_t audio_frames = 0;
};

// `samples` are mono at config.sampling_rate (resample.h); any length, none included.
LogMel whisper_log_mel(std::span<const float> samples, const WhisperFeatureConfig& config);

}  // namespace hfx::audio
