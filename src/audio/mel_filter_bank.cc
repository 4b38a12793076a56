#include "audio/mel_filter_bank.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hfx::audio {

namespace {

// Slaney's scale: 3 mels per 200 Hz up to 1 kHz (15 mels), then 27 mels per factor 6.4 in frequency.
constexpr double kMinLogHertz = 1000.0;
constexpr double kMinLogMel = 15.0;

// numpy.linspace(start, stop, num): start + i * ((stop - start) / (num - 1)), the last point exactly
// stop. Spelled as numpy computes it so the centres round as Transformers' do.
std::vector<double> linspace(double start, double stop, int num) {
  std::vector<double> out(static_cast<size_t>(num));
  const double step = (stop - start) / double(num - 1);
  for (int i = 0; i < num; ++i) out[size_t(i)] = double(i) * step + start;
  if (num > 1) out.back() = stop;
  return out;
}

}  // namespace

double hertz_to_slaney_mel(double hertz) {
  if (hertz >= kMinLogHertz) return kMinLogMel + std::log(hertz / kMinLogHertz) * (27.0 / std::log(6.4));
  return 3.0 * hertz / 200.0;
}

double slaney_mel_to_hertz(double mel) {
  if (mel >= kMinLogMel) return kMinLogHertz * std::exp((std::log(6.4) / 27.0) * (mel - kMinLogMel));
  return 200.0 * mel / 3.0;
}

MelFilterBank slaney_mel_filter_bank(int num_frequency_bins, int num_mel_filters, double min_frequency,
                                     double max_frequency, int sampling_rate) {
  HFX_CHECK(num_frequency_bins >= 2 && num_mel_filters >= 1 && min_frequency >= 0 &&
                min_frequency <= max_frequency && sampling_rate >= 1,
            "mel filter bank of {} bins, {} filters, {}..{} Hz at {} Hz", num_frequency_bins, num_mel_filters,
            min_frequency, max_frequency, sampling_rate);
  // num_mel_filters + 2 edges: filter m rises from edge m to its centre m + 1 and falls to edge m + 2.
  std::vector<double> edges = linspace(hertz_to_slaney_mel(min_frequency), hertz_to_slaney_mel(max_frequency),
                                       num_mel_filters + 2);
  for (double& e : edges) e = slaney_mel_to_hertz(e);
  // The bins' frequencies: numpy.linspace(0, sampling_rate // 2, num_frequency_bins).
  const std::vector<double> bin_hertz = linspace(0.0, double(sampling_rate / 2), num_frequency_bins);

  MelFilterBank bank;
  bank.num_frequency_bins = num_frequency_bins;
  bank.num_mel_filters = num_mel_filters;
  bank.weights.assign(size_t(num_frequency_bins) * size_t(num_mel_filters), 0.0);
  for (int bin = 0; bin < num_frequency_bins; ++bin) {
    for (int m = 0; m < num_mel_filters; ++m) {
      // Transformers' _create_triangular_filter_bank: slopes are (edge - bin frequency) over the
      // neighbouring edge gaps; the triangle is the smaller of the rising and falling slope, at least 0.
      const double down = -(edges[size_t(m)] - bin_hertz[size_t(bin)]) / (edges[size_t(m) + 1] - edges[size_t(m)]);
      const double up = (edges[size_t(m) + 2] - bin_hertz[size_t(bin)]) / (edges[size_t(m) + 2] - edges[size_t(m) + 1]);
      const double triangle = std::max(0.0, std::min(down, up));
      // Slaney normalisation: 2 / the filter's width in Hz, so every filter has the same area.
      bank.weights[size_t(bin) * size_t(num_mel_filters) + size_t(m)] =
          triangle * (2.0 / (edges[size_t(m) + 2] - edges[size_t(m)]));
    }
  }
  return bank;
}

}  // namespace hfx::audio
