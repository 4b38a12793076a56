#include "audio/load_audio.h"

#include "audio/resample.h"

namespace hfx::audio {

Sound load_audio(const std::filesystem::path& path, int sampling_rate) {
  Sound sound = read_sound_file(path);
  if (sound.sample_rate != sampling_rate) {
    sound.samples = resample(sound.samples, sound.sample_rate, sampling_rate);
    sound.sample_rate = sampling_rate;
  }
  return sound;
}

}  // namespace hfx::audio
