#include "audio/stft.h"

#include <fftw3.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <numbers>

#include "core/error.h"

namespace hfx::audio {

namespace {

// FFTW's planner keeps global state and is not thread-safe; fftw_execute on a finished plan is.
std::mutex& fftw_planner_mutex() {
  static std::mutex m;
  return m;
}

struct FftwFree {
  void operator()(void* p) const { fftw_free(p); }
};
struct FftwPlanDestroy {
  void operator()(fftw_plan_s* p) const {
    std::lock_guard lock(fftw_planner_mutex());
    fftw_destroy_plan(p);
  }
};

// torch.hann_window(n) (periodic): 0.5 - 0.5 cos(2 pi k / n), in torch's f32 steps (arange(n) times
// f32(2 pi / n), cos, times -0.5, plus 0.5), since a window rounded otherwise moves the leakage into
// the quiet bins. torch's vectorised cosf may round 12 of Whisper's 400 values one ulp away from this.
std::vector<double> periodic_hann(int n) {
  std::vector<double> w(static_cast<size_t>(n));
  const float step = float(2.0 * std::numbers::pi / double(n));
  for (int k = 0; k < n; ++k) {
    const float angle = float(k) * step;
    w[size_t(k)] = double(float(std::cos(double(angle))) * -0.5f + 0.5f);
  }
  return w;
}

}  // namespace

PowerSpectrogram power_spectrogram(std::span<const float> samples, int n_fft, int hop_length) {
  const int64_t n = int64_t(samples.size());
  const int64_t pad = n_fft / 2;
  HFX_CHECK(n_fft >= 2 && hop_length >= 1 && pad < n, "stft of {} samples, n_fft {}, hop {}", n, n_fft, hop_length);
  // Sample j of the reflect-padded signal.
  const auto padded = [&](int64_t j) -> double {
    int64_t i = j - pad;
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    return samples[size_t(i)];
  };

  PowerSpectrogram spec;
  spec.frames = 1 + (n + 2 * pad - n_fft) / hop_length;
  spec.bins = n_fft / 2 + 1;
  spec.power.resize(size_t(spec.frames) * size_t(spec.bins));

  std::unique_ptr<double, FftwFree> in(fftw_alloc_real(size_t(n_fft)));
  std::unique_ptr<fftw_complex, FftwFree> out(fftw_alloc_complex(size_t(spec.bins)));
  std::unique_ptr<fftw_plan_s, FftwPlanDestroy> plan;
  {
    std::lock_guard lock(fftw_planner_mutex());
    // FFTW_ESTIMATE: no timing runs, so the plan (and its rounding) is the same on every run.
    plan.reset(fftw_plan_dft_r2c_1d(n_fft, in.get(), out.get(), FFTW_ESTIMATE));
  }
  HFX_CHECK(plan != nullptr, "FFTW could not plan a real transform of {} points", n_fft);

  const std::vector<double> window = periodic_hann(n_fft);
  for (int64_t t = 0; t < spec.frames; ++t) {
    for (int k = 0; k < n_fft; ++k) in.get()[k] = padded(t * hop_length + k) * window[size_t(k)];
    fftw_execute(plan.get());
    double* row = spec.power.data() + size_t(t) * size_t(spec.bins);
    for (int64_t b = 0; b < spec.bins; ++b) {
      const double re = out.get()[b][0], im = out.get()[b][1];
      row[b] = re * re + im * im;
    }
  }
  return spec;
}

}  // namespace hfx::audio
