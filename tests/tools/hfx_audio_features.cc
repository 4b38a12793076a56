// hfx_audio_features FILE --preprocessor-config PATH --out FEATURES.f32 [--samples-out SAMPLES.f32]
//
// The audio front end alone, for tests/oracle/test_audio_features.py: FILE read and resampled to the
// config's rate (audio/load_audio.h), Whisper's log-mel features (audio/whisper_features.h) written as
// raw little-endian f32 [feature_size, nb_max_frames], and with --samples-out the resampled samples
// the features were computed from. Prints the shapes on stdout; an error is one line on stderr and
// exit code 1 (2 for a wrong command line).
#include <bit>
#include <cstdio>
#include <fstream>
#include <span>
#include <string>

#include "audio/load_audio.h"
#include "audio/whisper_features.h"
#include "core/error.h"

namespace {

static_assert(std::endian::native == std::endian::little, "the raw f32 files are little-endian");

void write_f32(const std::string& path, std::span<const float> values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size_bytes()));
  out.close();
  if (!out) hfx::fail(hfx::ErrorKind::Io, "{}: cannot write", path);
}

int usage(const std::string& why) {
  fmt::print(stderr,
             "hfx_audio_features: usage: {}\n  (hfx_audio_features FILE --preprocessor-config PATH --out FEATURES.f32 "
             "[--samples-out SAMPLES.f32])\n",
             why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, config_path, out_path, samples_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string* value = arg == "--preprocessor-config" ? &config_path
                         : arg == "--out"               ? &out_path
                         : arg == "--samples-out"       ? &samples_path
                                                        : nullptr;
    if (value != nullptr) {
      if (i + 1 == argc) return usage(arg + " needs a value");
      *value = argv[++i];
    } else if (arg.starts_with("--") || !file.empty()) {
      return usage("unexpected argument " + arg);
    } else {
      file = arg;
    }
  }
  if (file.empty() || config_path.empty() || out_path.empty()) return usage("FILE, --preprocessor-config and --out are required");
  try {
    const hfx::audio::WhisperFeatureConfig config = hfx::audio::read_whisper_feature_config(config_path);
    const hfx::audio::Sound sound = hfx::audio::load_audio(file, config.sampling_rate);
    const hfx::audio::LogMel features = hfx::audio::whisper_log_mel(sound.samples, config);
    write_f32(out_path, features.values);
    if (!samples_path.empty()) write_f32(samples_path, sound.samples);
    fmt::print("features {} {} audio_frames {}\nsamples {} {}\n", features.n_mels, features.n_frames,
               features.audio_frames, sound.samples.size(), sound.sample_rate);
    return 0;
  } catch (const hfx::Error& e) {
    fmt::print(stderr, "hfx_audio_features: {}: {}\n", hfx::error_kind_name(e.kind()), e.describe());
    return e.kind() == hfx::ErrorKind::Internal ? 70 : 1;
  }
}
