// Mono f32 samples resampled to another rate with libsoxr (Debian's libsoxr0), the resampling half of
// Transformers' `audio_utils.load_audio(path, backend="soundfile")` and of `librosa.load`:
// `soxr.resample(x, in_rate, out_rate, quality="soxr_hq")`, then the result zero-padded or cut to
// ceil(n * out_rate / in_rate) samples.
//
// The recipe is SOXR_HQ (soxr_quality_spec(SOXR_HQ, 0)): 20-bit precision, linear phase, the
// passband flat to 91.3% of the lower Nyquist rate. It is the one librosa, `datasets` through librosa
// and Transformers' soundfile backend use, so hfx's samples are those the model's users computed
// (another recipe, VHQ included, gives other samples).
#pragma once

#include <span>
#include <vector>

namespace hfx::audio {

// Rates in [1, kMaxSampleRate] (sound_file.h); the same rate returns a copy. libsoxr runs on one
// thread, f32 in and out, as the `soxr` wheel calls it for float32 input.
std::vector<float> resample(std::span<const float> samples, int in_rate, int out_rate);

}  // namespace hfx::audio
