#include "audio/resample.h"

#include <soxr.h>

#include <memory>

#include "audio/sound_file.h"
#include "core/error.h"

namespace hfx::audio {

namespace {

struct SoxrDeleter {
  void operator()(soxr_t s) const { soxr_delete(s); }
};

}  // namespace

std::vector<float> resample(std::span<const float> samples, int in_rate, int out_rate) {
  HFX_CHECK(in_rate >= 1 && in_rate <= kMaxSampleRate && out_rate >= 1 && out_rate <= kMaxSampleRate,
            "rates {} -> {} Hz", in_rate, out_rate);
  if (in_rate == out_rate) return {samples.begin(), samples.end()};
  // Transformers' length: ceil(n * out / in). n <= 2^28 and rates <= 2^20 keep the product in 64 bits.
  const uint64_t n = samples.size();
  const size_t target = size_t((n * uint64_t(out_rate) + uint64_t(in_rate) - 1) / uint64_t(in_rate));

  soxr_error_t error = nullptr;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);
  std::unique_ptr<soxr, SoxrDeleter> soxr(soxr_create(in_rate, out_rate, 1, &error, &io, &quality, &runtime));
  if (error != nullptr) fail(ErrorKind::Internal, "libsoxr: cannot resample {} -> {} Hz: {}", in_rate, out_rate, error);

  // The whole input, then the end-of-input call (null input) until libsoxr has drained its filter.
  std::vector<float> out;
  out.reserve(target + 1);
  std::vector<float> block(65536);
  size_t consumed = 0;
  for (;;) {
    const bool flushing = consumed == samples.size();
    size_t taken = 0, produced = 0;
    error = soxr_process(soxr.get(), flushing ? nullptr : samples.data() + consumed, flushing ? 0 : n - consumed,
                         &taken, block.data(), block.size(), &produced);
    if (error != nullptr) fail(ErrorKind::Internal, "libsoxr: resampling {} -> {} Hz: {}", in_rate, out_rate, error);
    consumed += taken;
    out.insert(out.end(), block.begin(), block.begin() + ptrdiff_t(produced));
    if (flushing && produced == 0) break;
  }
  out.resize(target, 0.0f);
  return out;
}

}  // namespace hfx::audio
