// A sound file as a speech model's feature extractor takes it: Transformers'
// `audio_utils.load_audio(path, sampling_rate, backend="soundfile")`, the same steps as
// `librosa.load(path, sr=sampling_rate)`: decoded and averaged to mono (sound_file.h), then resampled
// (resample.h) when the file's rate differs.
#pragma once

#include <filesystem>

#include "audio/sound_file.h"

namespace hfx::audio {

// The errors of read_sound_file. The result's sample_rate is `sampling_rate`; its channels and format
// describe the file.
Sound load_audio(const std::filesystem::path& path, int sampling_rate);

}  // namespace hfx::audio
