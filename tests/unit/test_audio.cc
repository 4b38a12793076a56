// The audio front end (src/audio): the Slaney mel filter bank against Transformers' values, a pure
// tone's peak in the spectrogram and in the log-mel features, silence's known features, sound files
// written here (PCM and float WAV) read back, resampling lengths, and one error line naming the file
// for what is not sound. tests/oracle/test_audio_features.py compares whole features with Transformers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "audio/load_audio.h"
#include "audio/mel_filter_bank.h"
#include "audio/resample.h"
#include "audio/sound_file.h"
#include "audio/stft.h"
#include "audio/whisper_features.h"
#include "core/error.h"

namespace fs = std::filesystem;
using namespace hfx;
using namespace hfx::audio;

namespace {

class ScratchFolder {
 public:
  ScratchFolder() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / ("hfx-audio-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~ScratchFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char((value >> (8 * i)) & 0xff);
}

// A canonical RIFF/WAVE file: format tag 1 (PCM, 16-bit) or 3 (IEEE float, 32-bit), interleaved frames.
std::string wav_bytes(int format_tag, int channels, int rate, const std::string& data) {
  const int bits = format_tag == 1 ? 16 : 32;
  std::string w = "RIFF";
  put_le(w, 36 + data.size(), 4);
  w += "WAVEfmt ";
  put_le(w, 16, 4);
  put_le(w, uint64_t(format_tag), 2);
  put_le(w, uint64_t(channels), 2);
  put_le(w, uint64_t(rate), 4);
  put_le(w, uint64_t(rate) * uint64_t(channels) * uint64_t(bits / 8), 4);
  put_le(w, uint64_t(channels * bits / 8), 2);
  put_le(w, uint64_t(bits), 2);
  w += "data";
  put_le(w, data.size(), 4);
  return w + data;
}

std::string pcm16(std::initializer_list<int16_t> samples) {
  std::string d;
  for (int16_t s : samples) put_le(d, uint16_t(s), 2);
  return d;
}

std::string f32(std::initializer_list<float> samples) {
  std::string d;
  for (float s : samples) {
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    put_le(d, bits, 4);
  }
  return d;
}

// The error's one line, and that it names the file.
std::string error_of(const fs::path& p, ErrorKind expected_kind) {
  try {
    read_sound_file(p);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), expected_kind) << e.describe();
    const std::string line = e.describe();
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    EXPECT_NE(line.find(p.string()), std::string::npos) << line;
    return line;
  }
  ADD_FAILURE() << p << " was read";
  return "";
}

std::vector<float> sine(double hertz, int rate, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(0.5 * std::sin(2 * std::numbers::pi * hertz * double(i) / rate));
  return x;
}

}  // namespace

// transformers.audio_utils.mel_filter_bank(201, M, 0.0, 8000.0, 16000, norm="slaney", mel_scale="slaney")
// (Transformers 5.23.0, float64), entry (bin, mel) as hex floats.
TEST(MelFilterBank, MatchesTransformersSlaneyFilters) {
  struct Entry {
    int mels, bin, mel;
    double value;
  };
  const Entry entries[] = {
      {80, 1, 0, 0x1.97594703919d7p-6},     {80, 1, 1, 0x1.04f0e5cd96effp-9},
      {80, 2, 1, 0x1.76bb2a49debf9p-6},     {80, 10, 10, 0x1.462d1f40fcac8p-6},
      {80, 11, 10, 0x1.44b09f0a53c4cp-8},   {80, 42, 40, 0x1.629f476f1ec1cp-8},
      {80, 43, 40, 0x1.e2dae27948f71p-7},   {80, 186, 79, 0x1.808e7855049f3p-12},
      {80, 193, 79, 0x1.9bbcfadca6a28p-9},  {128, 1, 0, 0x1.9578854f567b9p-7},
      {128, 1, 1, 0x1.f1f3a80a7f740p-6},    {128, 6, 10, 0x1.71ec8aeca3e40p-7},
      {128, 7, 10, 0x1.1c5fd31594c98p-10},  {128, 42, 64, 0x1.ba58e27994047p-8},
      {128, 43, 64, 0x1.286953211f34ep-6},  {128, 191, 127, 0x1.f2cd6d38ce566p-12},
      {128, 195, 127, 0x1.4a680a504df72p-8},
  };
  const MelFilterBank bank80 = slaney_mel_filter_bank(201, 80, 0.0, 8000.0, 16000);
  const MelFilterBank bank128 = slaney_mel_filter_bank(201, 128, 0.0, 8000.0, 16000);
  for (const Entry& e : entries) {
    const MelFilterBank& bank = e.mels == 80 ? bank80 : bank128;
    // libm's log/exp and numpy's may round the last bit differently; the features see f32 weights.
    EXPECT_NEAR(bank.at(e.bin, e.mel), e.value, 1e-14 * e.value) << e.mels << " mels, bin " << e.bin << ", mel " << e.mel;
  }
  // Each filter is a narrow triangle: Transformers' banks have 391 and 394 non-zero weights.
  EXPECT_EQ(std::count_if(bank80.weights.begin(), bank80.weights.end(), [](double w) { return w != 0; }), 391);
  EXPECT_EQ(std::count_if(bank128.weights.begin(), bank128.weights.end(), [](double w) { return w != 0; }), 394);
  EXPECT_EQ(bank80.at(0, 79), 0.0);
  EXPECT_EQ(bank80.at(200, 0), 0.0);
}

TEST(MelFilterBank, SlaneyScaleIsLinearBelowOneKilohertzAndLogarithmicAbove) {
  EXPECT_DOUBLE_EQ(hertz_to_slaney_mel(200.0), 3.0);
  EXPECT_DOUBLE_EQ(hertz_to_slaney_mel(1000.0), 15.0);
  EXPECT_NEAR(hertz_to_slaney_mel(6400.0), 42.0, 1e-12);  // 27 mels per factor 6.4
  for (double hz : {50.0, 999.0, 1000.0, 4321.0, 8000.0}) EXPECT_NEAR(slaney_mel_to_hertz(hertz_to_slaney_mel(hz)), hz, 1e-9);
}

TEST(Stft, PureToneConcentratesInItsBin) {
  // 1 kHz at 16 kHz, n_fft 400: bins are 40 Hz apart, so the tone is bin 25 exactly.
  const std::vector<float> x = sine(1000.0, 16000, 16000);
  const PowerSpectrogram spec = power_spectrogram(x, 400, 160);
  EXPECT_EQ(spec.frames, 1 + 16000 / 160);
  EXPECT_EQ(spec.bins, 201);
  const double* middle = spec.power.data() + size_t(50 * spec.bins);
  EXPECT_EQ(std::max_element(middle, middle + spec.bins) - middle, 25);
  // Parseval with the periodic Hann window: the tone's power lands in bins 24..26 (1/4, 1, 1/4 of
  // (0.5 * 400 / 4)^2 for amplitude 0.5), nothing elsewhere beyond rounding.
  const double peak = (0.5 * 400 / 4) * (0.5 * 400 / 4);
  EXPECT_NEAR(middle[25], peak, 1e-6 * peak);
  EXPECT_NEAR(middle[24], peak / 4, 1e-6 * peak);
  EXPECT_LT(middle[100], 1e-9 * peak);
}

// torch.stft(x, 400, 160, window=torch.hann_window(400) as float64, center=True, pad_mode="reflect")
// .abs() ** 2 of x[i] = sin(0.05 i) + 0.3 cos(0.31 i) (rounded to f32), 1000 samples: frame 0 and
// frame 6 read the reflection before the start and past the end, which a signal starting at full
// amplitude tells apart from any other padding. (torch 2.13.0, entry [bin, frame], hex floats.)
TEST(Stft, MatchesTorchStftWithReflectPadding) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.05 * double(i)) + 0.3 * std::cos(0.31 * double(i)));
  const PowerSpectrogram spec = power_spectrogram(x, 400, 160);
  ASSERT_EQ(spec.frames, 7);
  struct Entry {
    int frame, bin;
    double power;
  };
  const Entry entries[] = {{0, 0, 0x1.96f2ee58bd2cep+10}, {0, 3, 0x1.781aa9d9f5a25p+9}, {0, 10, 0x1.47861451b6e6ep+4},
                           {3, 5, 0x1.0f8ce19cbed05p+4},  {6, 3, 0x1.f7eb567f8bcddp+11}, {6, 20, 0x1.fb8f65a1e0fc8p+7}};
  for (const Entry& e : entries) {
    // torch's window and hfx's differ in the last bit of a few values (torch's vectorised cosf).
    EXPECT_NEAR(spec.power[size_t(e.frame * spec.bins + e.bin)], e.power, 1e-6 * e.power)
        << "frame " << e.frame << ", bin " << e.bin;
  }
}

TEST(WhisperLogMel, ToneLightsTheFilterOverItsBinAndSilenceIsMinusOneAndAHalf) {
  WhisperFeatureConfig config;  // Whisper's defaults: 80 mels, 30 s at 16 kHz
  const LogMel tone = whisper_log_mel(sine(1000.0, 16000, 16000), config);
  ASSERT_EQ(tone.n_mels, 80);
  ASSERT_EQ(tone.n_frames, 3000);
  EXPECT_EQ(tone.values.size(), size_t(80 * 3000));
  EXPECT_EQ(tone.audio_frames, 100);
  const MelFilterBank bank = slaney_mel_filter_bank(201, 80, 0.0, 8000.0, 16000);
  int widest = 0;
  for (int m = 1; m < 80; ++m)
    if (bank.at(25, m) > bank.at(25, widest)) widest = m;
  int loudest = 0;
  for (int m = 1; m < 80; ++m)
    if (tone.values[size_t(m) * 3000 + 50] > tone.values[size_t(loudest) * 3000 + 50]) loudest = m;
  EXPECT_EQ(loudest, widest);
  // The maximum is the tone's; everything is floored at max - 8, so the padding (zeros) sits at the floor.
  const float max = *std::max_element(tone.values.begin(), tone.values.end());
  EXPECT_FLOAT_EQ(tone.values[size_t(loudest) * 3000 + 2999], max - 2.0f);  // ((m - 8) + 4) / 4 = (m + 4) / 4 - 2

  // Silence: log10(1e-10) = -10 everywhere, the floor below it, (-10 + 4) / 4.
  const LogMel silence = whisper_log_mel(std::vector<float>(100, 0.0f), config);
  for (float v : silence.values) ASSERT_EQ(v, -1.5f);
  EXPECT_EQ(silence.audio_frames, 1);
  // No samples at all: the padding alone.
  EXPECT_EQ(whisper_log_mel({}, config).values, silence.values);
}

TEST(WhisperLogMel, LongAudioIsCutToTheWindow) {
  WhisperFeatureConfig config;
  config.chunk_length = 1;  // 16000 samples, 100 frames
  std::vector<float> x = sine(440.0, 16000, 16000);
  const LogMel exact = whisper_log_mel(x, config);
  std::vector<float> longer = x;
  longer.resize(40000, 0.25f);
  const LogMel cut = whisper_log_mel(longer, config);
  EXPECT_EQ(cut.n_frames, 100);
  EXPECT_EQ(cut.audio_frames, 100);
  EXPECT_EQ(cut.values, exact.values);
}

TEST(WhisperFeatureConfig, ReadsTheFieldsAndRefusesDitherAndInconsistentLengths) {
  ScratchFolder dir;
  write_bytes(dir / "large.json",
              R"({"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "sampling_rate": 16000,
                  "hop_length": 160, "chunk_length": 30, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000,
                  "padding_value": 0.0, "dither": 0.0})");
  const WhisperFeatureConfig c = read_whisper_feature_config(dir / "large.json");
  EXPECT_EQ(c.feature_size, 128);
  EXPECT_EQ(c.n_samples(), 480000);
  EXPECT_EQ(c.nb_max_frames(), 3000);
  EXPECT_EQ(read_whisper_feature_config((write_bytes(dir / "empty.json", "{}"), dir / "empty.json")).feature_size, 80);

  const auto refusal = [&](const std::string& json, ErrorKind kind, const std::string& field) {
    write_bytes(dir / "bad.json", json);
    try {
      read_whisper_feature_config(dir / "bad.json");
      ADD_FAILURE() << json << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.describe();
      EXPECT_NE(e.describe().find(field), std::string::npos) << e.describe();
      EXPECT_NE(e.describe().find("bad.json"), std::string::npos) << e.describe();
    }
  };
  refusal(R"({"dither": 0.0001})", ErrorKind::Unsupported, "\"dither\"");
  refusal(R"({"n_samples": 160000})", ErrorKind::BadInput, "\"n_samples\"");
  refusal(R"({"nb_max_frames": 1500})", ErrorKind::BadInput, "\"nb_max_frames\"");
  refusal(R"({"feature_size": 0})", ErrorKind::BadInput, "\"feature_size\"");
  refusal(R"({"n_fft": "400"})", ErrorKind::BadInput, "\"n_fft\"");
  refusal(R"({"feature_extractor_type": "Wav2Vec2FeatureExtractor"})", ErrorKind::BadInput, "feature_extractor_type");
  refusal(R"({"chunk_length": 1, "sampling_rate": 100, "n_fft": 400})", ErrorKind::BadInput, "too short");
}

TEST(SoundFile, ReadsPcmAndFloatWavAndAveragesChannels) {
  ScratchFolder dir;
  write_bytes(dir / "mono.wav", wav_bytes(1, 1, 8000, pcm16({0, 16384, -32768, 32767})));
  const Sound mono = read_sound_file(dir / "mono.wav");
  EXPECT_EQ(mono.sample_rate, 8000);
  EXPECT_EQ(mono.channels, 1);
  EXPECT_EQ(mono.samples, (std::vector<float>{0.0f, 0.5f, -1.0f, 32767.0f / 32768.0f}));  // libsndfile's int16 / 32768
  EXPECT_NE(mono.format.find("16 bit PCM"), std::string::npos) << mono.format;

  write_bytes(dir / "stereo.wav", wav_bytes(3, 2, 44100, f32({0.25f, 0.75f, -1.0f, 0.0f, 2.0f, 2.0f})));
  const Sound stereo = read_sound_file(dir / "stereo.wav");
  EXPECT_EQ(stereo.channels, 2);
  EXPECT_EQ(stereo.samples, (std::vector<float>{0.5f, -0.5f, 2.0f}));  // float samples as stored, not clipped
}

TEST(SoundFile, NotSoundIsOneLineNamingTheFile) {
  ScratchFolder dir;
  write_bytes(dir / "notes.wav", "these are words, not samples\n");
  const std::string text = error_of(dir / "notes.wav", ErrorKind::BadInput);
  EXPECT_NE(text.find("expected a sound file"), std::string::npos) << text;

  write_bytes(dir / "empty.wav", "");
  EXPECT_NE(error_of(dir / "empty.wav", ErrorKind::BadInput).find("empty"), std::string::npos);

  const std::string whole = wav_bytes(1, 1, 16000, pcm16({1, 2, 3, 4}));
  write_bytes(dir / "header_cut.wav", whole.substr(0, 20));
  error_of(dir / "header_cut.wav", ErrorKind::BadInput);

  write_bytes(dir / "no_frames.wav", wav_bytes(1, 1, 16000, ""));
  EXPECT_NE(error_of(dir / "no_frames.wav", ErrorKind::BadInput).find("no audio frames"), std::string::npos);

  write_bytes(dir / "nan.wav", wav_bytes(3, 1, 16000, f32({0.0f, std::nanf("")})));
  EXPECT_NE(error_of(dir / "nan.wav", ErrorKind::BadInput).find("finite"), std::string::npos);

  fs::create_directories(dir / "folder.wav");
  EXPECT_NE(error_of(dir / "folder.wav", ErrorKind::BadInput).find("folder"), std::string::npos);

  error_of(dir / "missing.wav", ErrorKind::Io);
}

TEST(Resample, LengthIsTransformersCeilAndTheToneSurvives) {
  // 22050 -> 16000: ceil(22050 * 16000 / 22050) = 16000; 7 samples at 44100 -> ceil(7 * 16000 / 44100) = 3.
  const std::vector<float> x = sine(440.0, 22050, 22050);
  const std::vector<float> y = resample(x, 22050, 16000);
  ASSERT_EQ(y.size(), 16000u);
  EXPECT_EQ(resample(std::vector<float>(7, 0.1f), 44100, 16000).size(), 3u);
  EXPECT_EQ(resample(x, 22050, 22050), x);
  // Away from the edges the 440 Hz tone is the same tone at the new rate (HQ: far below 1e-3).
  const std::vector<float> expected = sine(440.0, 16000, 16000);
  for (size_t i = 1000; i < 15000; ++i) ASSERT_NEAR(y[i], expected[i], 1e-3) << i;
}

TEST(LoadAudio, ResamplesToTheModelsRate) {
  ScratchFolder dir;
  std::string data;
  for (int i = 0; i < 8000; ++i) put_le(data, uint16_t(int16_t(i % 100)), 2);
  write_bytes(dir / "eight.wav", wav_bytes(1, 1, 8000, data));
  const Sound sound = load_audio(dir / "eight.wav", 16000);
  EXPECT_EQ(sound.sample_rate, 16000);
  EXPECT_EQ(sound.samples.size(), 16000u);
  EXPECT_EQ(sound.channels, 1);
}
