#include "audio/whisper_features.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "audio/mel_filter_bank.h"
#include "audio/sound_file.h"
#include "audio/stft.h"
#include "core/error.h"
#include "io/json_fields.h"

namespace hfx::audio {

namespace {

// WhisperFeatureExtractor builds its filters up to 8000 Hz whatever the sampling rate.
constexpr double kMelMaxHertz = 8000.0;
// Bounds on the file's values, so a hostile config cannot ask for absurd work: Whisper's are
// 80/128 mels, n_fft 400, hop 160, 30 s at 16 kHz.
constexpr int64_t kMaxFeatureSize = 1024;
constexpr int64_t kMaxFft = 1 << 16;
constexpr int64_t kMaxChunkSeconds = 3600;

}  // namespace

WhisperFeatureConfig read_whisper_feature_config(const std::filesystem::path& preprocessor_config) {
  const io::JsonFile file = io::JsonFile::load(preprocessor_config);
  const nlohmann::json& j = file.json;
  const std::string where = file.path.string();
  if (auto type = io::optional_string(file, j, "feature_extractor_type"); type && *type != "WhisperFeatureExtractor")
    bad_input("{}: field \"feature_extractor_type\": expected \"WhisperFeatureExtractor\", found \"{}\"", where, *type);

  WhisperFeatureConfig c;
  c.feature_size = int(io::optional_int(file, j, "feature_size", 1, kMaxFeatureSize).value_or(c.feature_size));
  c.sampling_rate = int(io::optional_int(file, j, "sampling_rate", 1, kMaxSampleRate).value_or(c.sampling_rate));
  c.n_fft = int(io::optional_int(file, j, "n_fft", 2, kMaxFft).value_or(c.n_fft));
  c.hop_length = int(io::optional_int(file, j, "hop_length", 1, kMaxFft).value_or(c.hop_length));
  c.chunk_length = int(io::optional_int(file, j, "chunk_length", 1, kMaxChunkSeconds).value_or(c.chunk_length));
  c.padding_value = float(io::optional_number(file, j, "padding_value").value_or(c.padding_value));
  if (const double dither = io::optional_number(file, j, "dither").value_or(0.0); dither != 0.0)
    unsupported("{}: field \"dither\": expected 0 (hfx computes features without noise), found {}: the extractor "
                "adds torch.randn noise, which no other run reproduces",
                where, dither);
  // The extractor derives these two from chunk_length and ignores the file's; a file that disagrees
  // was edited by hand, and the features would not have the length its model expects.
  if (auto n = io::optional_int(file, j, "n_samples", 1); n && *n != c.n_samples())
    bad_input("{}: field \"n_samples\": expected chunk_length * sampling_rate = {}, found {}", where, c.n_samples(), *n);
  if (auto n = io::optional_int(file, j, "nb_max_frames", 1); n && *n != c.nb_max_frames())
    bad_input("{}: field \"nb_max_frames\": expected n_samples / hop_length = {}, found {}", where,
              c.nb_max_frames(), *n);
  // torch.stft's reflection needs more samples than half a window, and at least one frame must remain.
  if (c.n_samples() <= c.n_fft / 2 || c.nb_max_frames() < 1)
    bad_input("{}: chunk_length * sampling_rate = {} samples is too short for n_fft {} and hop_length {}", where,
              c.n_samples(), c.n_fft, c.hop_length);
  return c;
}

LogMel whisper_log_mel(std::span<const float> samples, const WhisperFeatureConfig& config) {
  // 1. Cut or pad to the window.
  const int64_t n_samples = config.n_samples();
  std::vector<float> window(size_t(n_samples), config.padding_value);
  const int64_t kept = std::min<int64_t>(int64_t(samples.size()), n_samples);
  std::copy_n(samples.begin(), kept, window.begin());

  // 2. Power spectrogram, the last frame dropped (stft[..., :-1]).
  const PowerSpectrogram spec = power_spectrogram(window, config.n_fft, config.hop_length);
  const int64_t frames = spec.frames - 1;

  // 3. Mel filters, f32 weights as torch holds them. A filter is non-zero over a few neighbouring bins:
  // summing over those alone gives the same sum as the dense product.
  const MelFilterBank bank =
      slaney_mel_filter_bank(int(spec.bins), config.feature_size, 0.0, kMelMaxHertz, config.sampling_rate);
  struct Filter {
    int64_t first_bin = 0;
    std::vector<double> weights;
  };
  std::vector<Filter> filters(size_t(config.feature_size));
  for (int m = 0; m < config.feature_size; ++m) {
    int64_t first = spec.bins, last = -1;
    for (int b = 0; b < spec.bins; ++b)
      if (bank.at(b, m) != 0.0) first = std::min<int64_t>(first, b), last = b;
    filters[size_t(m)].first_bin = first;
    for (int64_t b = first; b <= last; ++b) filters[size_t(m)].weights.push_back(double(float(bank.at(int(b), m))));
  }

  // 4. log10, clamped below at 1e-10, then floored at max - 8 and scaled, in f32 as torch does.
  LogMel out;
  out.n_mels = config.feature_size;
  out.n_frames = frames;
  out.audio_frames = (kept + config.hop_length - 1) / config.hop_length;
  out.values.resize(size_t(out.n_mels) * size_t(frames));
  float max_log = -std::numeric_limits<float>::infinity();
  for (int64_t m = 0; m < out.n_mels; ++m) {
    const Filter& f = filters[size_t(m)];
    for (int64_t t = 0; t < frames; ++t) {
      const double* power = spec.power.data() + size_t(t) * size_t(spec.bins) + size_t(f.first_bin);
      double mel = 0;
      for (size_t k = 0; k < f.weights.size(); ++k) mel += f.weights[k] * power[k];
      const float log_mel = float(std::log10(std::max(mel, 1e-10)));
      out.values[size_t(m) * size_t(frames) + size_t(t)] = log_mel;
      max_log = std::max(max_log, log_mel);
    }
  }
  const float floor = max_log - 8.0f;
  for (float& v : out.values) v = (std::max(v, floor) + 4.0f) / 4.0f;
  return out;
}

}  // namespace hfx::audio
