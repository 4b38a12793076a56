// The power spectrogram |STFT|^2 of a signal as `torch.stft(x, n_fft, hop_length,
// window=torch.hann_window(n_fft), center=True, pad_mode="reflect", return_complex=True).abs() ** 2`
// gives it, through FFTW's real-to-complex transform (Debian's libfftw3, double precision):
//   - the signal padded by n_fft / 2 on each side with its reflection (x[-k] = x[k], the edge sample
//     not repeated), so frame t is centred on sample t * hop_length;
//   - frames = 1 + (n + 2 * (n_fft / 2) - n_fft) / hop_length, each multiplied by the periodic Hann
//     window 0.5 - 0.5 cos(2 pi k / n_fft) (computed in f32 as torch.hann_window computes it);
//   - the one-sided spectrum, bins 0 .. n_fft / 2.
// Computed in double from f32 samples: torch's f32 transform differs from it by its own rounding.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hfx::audio {

struct PowerSpectrogram {
  int64_t frames = 0;
  int64_t bins = 0;           // n_fft / 2 + 1
  std::vector<double> power;  // [frames, bins], row-major
};

// n_fft >= 2, hop_length >= 1, and n_fft / 2 < samples.size() (torch's condition for a reflection);
// an internal error otherwise (callers validate user values first).
PowerSpectrogram power_spectrogram(std::span<const float> samples, int n_fft, int hop_length);

}  // namespace hfx::audio
