// A sound file (`hfx generate --audio`): audio::load_audio on the input (libsndfile's reader, hfx's
// bounds, the resampler), then Whisper's log-mel features of what it decoded. Every accepted file
// must give finite samples and features of the extractor's shape.
#include <cmath>

#include "audio/load_audio.h"
#include "audio/whisper_features.h"
#include "harness.h"

using namespace hfx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "sound.wav";
  fuzz::write_file(path, data, size);
  fuzz::expect_user_errors([&] {
    const audio::Sound sound = audio::load_audio(path, 16000);
    HFX_FUZZ_ASSERT(sound.sample_rate == 16000 && !sound.samples.empty(), "an accepted sound at another rate or empty");
    audio::WhisperFeatureConfig config;
    config.chunk_length = 1;  // one second: 100 frames, enough to run every step
    const audio::LogMel mel = audio::whisper_log_mel(sound.samples, config);
    HFX_FUZZ_ASSERT(mel.n_mels == 80 && mel.n_frames == 100 && mel.values.size() == 8000, "features of another shape");
    for (float v : mel.values) HFX_FUZZ_ASSERT(std::isfinite(v), "a feature that is not finite");
  });
  return 0;
}
