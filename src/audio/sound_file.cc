#include "audio/sound_file.h"

#include <sndfile.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <system_error>

#include "core/error.h"

namespace hfx::audio {

namespace {

struct SndfileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndfileHandle = std::unique_ptr<SNDFILE, SndfileCloser>;

// "WAV (Microsoft), Signed 16 bit PCM": libsndfile's names for the container and the sample encoding.
std::string describe_format(int format) {
  SF_FORMAT_INFO major{}, sub{};
  major.format = format & SF_FORMAT_TYPEMASK;
  sub.format = format & SF_FORMAT_SUBMASK;
  const bool has_major = sf_command(nullptr, SFC_GET_FORMAT_INFO, &major, sizeof(major)) == 0;
  const bool has_sub = sf_command(nullptr, SFC_GET_FORMAT_INFO, &sub, sizeof(sub)) == 0;
  return fmt::format("{}, {}", has_major ? major.name : "unknown container", has_sub ? sub.name : "unknown encoding");
}

// The checks that need no decoding: what the path is, and whether it holds any bytes at all.
void check_is_nonempty_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    fail(ErrorKind::Io, "{}: cannot read the sound file: {}", path.string(),
         ec ? ec.message() : std::strerror(ENOENT));
  if (std::filesystem::is_directory(status))
    bad_input("{}: is a folder, expected a sound file (WAV, FLAC, ...)", path.string());
  if (!std::filesystem::is_regular_file(status))
    bad_input("{}: is not a regular file, expected a sound file (WAV, FLAC, ...)", path.string());
  if (std::filesystem::file_size(path, ec) == 0 && !ec)
    bad_input("{}: is empty (0 bytes), expected a sound file (WAV, FLAC, ...)", path.string());
}

}  // namespace

Sound read_sound_file(const std::filesystem::path& path) {
  const std::string where = path.string();
  check_is_nonempty_file(path);

  SF_INFO info{};
  SndfileHandle file(sf_open(path.c_str(), SFM_READ, &info));
  if (!file) {
    // sf_error(nullptr) is the error of the last sf_open; SF_ERR_SYSTEM is the OS refusing (permissions).
    const int code = sf_error(nullptr);
    const char* why = sf_strerror(nullptr);
    if (code == SF_ERR_SYSTEM) fail(ErrorKind::Io, "{}: cannot open the sound file: {}", where, why);
    bad_input("{}: expected a sound file (WAV, FLAC, Ogg, AIFF, ...); libsndfile cannot read it: {}", where, why);
  }
  Sound sound;
  sound.format = describe_format(info.format);
  sound.channels = info.channels;
  sound.sample_rate = info.samplerate;
  if (info.channels < 1) bad_input("{}: {} declares {} channels", where, sound.format, info.channels);
  if (info.samplerate < 1 || info.samplerate > kMaxSampleRate)
    bad_input("{}: sample rate {} Hz; expected 1 to {} Hz", where, info.samplerate, kMaxSampleRate);
  if (info.frames <= 0) bad_input("{}: {} holds no audio frames", where, sound.format);
  if (info.frames > kMaxSoundFrames)
    bad_input("{}: {} frames at {} Hz ({:.1f} hours); hfx reads at most {} frames ({:.1f} hours at that rate)",
              where, info.frames, info.samplerate, double(info.frames) / info.samplerate / 3600, kMaxSoundFrames,
              double(kMaxSoundFrames) / info.samplerate / 3600);

  // Blocks of interleaved frames, averaged to mono as they arrive, so memory stays one mono copy.
  const int64_t block_frames = 65536;
  std::vector<float> block(size_t(block_frames) * size_t(info.channels));
  // The header's count is the file's claim: reserve no more than 16 Mi frames on its word (growth
  // past that is amortised), so a short file that claims hours allocates nothing for them.
  sound.samples.reserve(size_t(std::min<sf_count_t>(info.frames, sf_count_t(1) << 24)));
  for (;;) {
    const sf_count_t got = sf_readf_float(file.get(), block.data(), block_frames);
    if (got < 0 || sf_error(file.get()) != SF_ERR_NO_ERROR)
      bad_input("{}: {}: cannot decode past frame {}: {}", where, sound.format, sound.samples.size(),
                sf_strerror(file.get()));
    if (got == 0) break;
    if (int64_t(sound.samples.size()) + got > kMaxSoundFrames)
      bad_input("{}: more than {} frames decoded; hfx reads at most that many", where, kMaxSoundFrames);
    for (sf_count_t frame = 0; frame < got; ++frame) {
      const float* channel = block.data() + size_t(frame) * size_t(info.channels);
      // numpy's float32 mean: the sum, then one division (for two channels, exactly (l + r) / 2).
      double sum = 0;
      for (int c = 0; c < info.channels; ++c) {
        if (!std::isfinite(channel[c]) || std::fabs(channel[c]) > kMaxSampleMagnitude)
          bad_input("{}: sample {} of channel {} is {}; expected finite samples of magnitude at most {} (audio is "
                    "nominally within [-1, 1])",
                    where, sound.samples.size(), c, channel[c], kMaxSampleMagnitude);
        sum += channel[c];
      }
      sound.samples.push_back(info.channels == 1 ? channel[0] : float(sum / info.channels));
    }
  }
  if (sound.samples.empty()) bad_input("{}: {} holds no audio frames", where, sound.format);
  return sound;
}

}  // namespace hfx::audio
