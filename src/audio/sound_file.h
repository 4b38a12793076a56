// A sound file read into mono f32 samples, through libsndfile (Debian's libsndfile1): WAV, FLAC, Ogg,
// AIFF, ... whatever the library reads. This is the decoding half of Transformers'
// `audio_utils.load_audio(path, backend="soundfile")` (the `soundfile` wheel wraps the same library):
// integer formats scaled to [-1, 1) by libsndfile (int16 / 32768), float formats as stored, channels
// averaged per frame as its `waveform.mean(axis=0)` does (and librosa.to_mono; the pipeline's
// ffmpeg_read asks ffmpeg for `-ac 1` instead, whose downmix matrix is ffmpeg's own).
//
// A user's file is hostile input: every way it can be wrong is one BadInput line that starts with the
// file's name and says what was expected and what was found (docs/audio.md lists them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hfx::audio {

// At most 2^28 frames are read (1 GiB of mono f32): 4.6 hours at 16 kHz, 1.5 hours at 48 kHz. Whisper
// sees 30 s at a time; a file past this is refused before its samples are read, not cut.
inline constexpr int64_t kMaxSoundFrames = int64_t(1) << 28;
// libsndfile accepts rates up to 655350 Hz; hfx takes what audio hardware records, up to 768 kHz.
inline constexpr int kMaxSampleRate = 768000;
// Samples are nominally within [-1, 1]; a float file may exceed that (clipped mixes), but not by
// orders of magnitude: the resampler and the spectrogram work in f32 and would overflow near FLT_MAX.
inline constexpr float kMaxSampleMagnitude = 1e6f;

struct Sound {
  std::vector<float> samples;  // mono: the channels of each frame averaged
  int sample_rate = 0;         // Hz, as the file says
  int channels = 0;            // in the file, before the average
  std::string format;          // libsndfile's description: "WAV (Microsoft), Signed 16 bit PCM"
};

// BadInput (naming the file) for a folder, an empty file, a file libsndfile does not recognise as
// sound, a rate outside [1, kMaxSampleRate], no frames, more than kMaxSoundFrames frames, a decoding
// error midway, or a sample that is NaN or infinite; Io when the file is missing or cannot be opened.
// A file whose data ends before its header's frame count is read as far as it goes, as libsndfile
// and `soundfile` read it.
Sound read_sound_file(const std::filesystem::path& path);

}  // namespace hfx::audio
