// The Slaney mel filter bank, as `transformers.audio_utils.mel_filter_bank(num_frequency_bins,
// num_mel_filters, min_frequency, max_frequency, sampling_rate, norm="slaney", mel_scale="slaney")`
// computes it in float64 (and librosa.filters.mel with norm="slaney", transposed): filter centres
// evenly spaced on the Slaney mel scale (linear below 1 kHz, logarithmic above), triangles over the
// FFT bins' frequencies in Hz, each scaled by 2 / its width in Hz (equal area).
#pragma once

#include <cstddef>
#include <vector>

namespace hfx::audio {

struct MelFilterBank {
  int num_frequency_bins = 0;  // n_fft / 2 + 1
  int num_mel_filters = 0;
  std::vector<double> weights;  // [num_frequency_bins, num_mel_filters], row-major: Transformers' layout

  double at(int bin, int mel) const { return weights[size_t(bin) * size_t(num_mel_filters) + size_t(mel)]; }
};

// Slaney's mel scale (librosa's htk=False), and its inverse.
double hertz_to_slaney_mel(double hertz);
double slaney_mel_to_hertz(double mel);

// Arguments as Transformers checks them: num_frequency_bins >= 2, num_mel_filters >= 1,
// 0 <= min_frequency <= max_frequency, sampling_rate >= 1 (an internal error otherwise: callers
// validate user values first). A filter that covers no bin is all zeros, as in Transformers (which
// warns).
MelFilterBank slaney_mel_filter_bank(int num_frequency_bins, int num_mel_filters, double min_frequency,
                                     double max_frequency, int sampling_rate);

}  // namespace hfx::audio
