// `hfx generate`: the decode loop in C++ on the reference executor, over the graphs read back from an
// export's files (not the in-memory model), so it checks what would ship.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "audio/load_audio.h"
#include "audio/whisper_features.h"
#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"
#include "core/files.h"
#include "io/json_fields.h"
#include "pipeline/artifact.h"
#include "pipeline/backend.h"
#include "pipeline/verify_cases.h"
#include "pipeline/verify_runtimes.h"
#include "runtime/generate.h"
#include "runtime/seq2seq_generate.h"
#include "runtime/generation_rules.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace hfx::cli {

namespace {

// Refuses up front what the export cannot run, naming the numbers, rather than failing mid-way inside
// a graph (an out-of-range Gather, a bound check after the tokens so far were lost).
// The sampling flags' ranges, before anything is opened (F#11): values that mean nothing are refused.
void check_sampling_flags(const runtime::SamplingOptions& o) {
  if (o.max_new_tokens < 1) usage_error("--max-new-tokens {}: expected at least 1", o.max_new_tokens);
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    usage_error("--temperature {}: expected a number >= 0 (0 = greedy)", o.temperature);
  if (o.top_k < 0) usage_error("--top-k {}: expected a number of tokens >= 0 (0 = off)", o.top_k);
  if (!(o.top_p > 0 && o.top_p <= 1)) usage_error("--top-p {}: expected a probability mass in (0, 1] (1 = off)", o.top_p);
}

void check_prompts_fit(const pipeline::Artifact& art, const std::vector<std::vector<int64_t>>& prompts, int64_t new_tokens) {
  const auto& model = art.manifest["model"];
  if (model.contains("vocab_size") && model["vocab_size"].is_number_integer()) {
    auto vocab = model["vocab_size"].get<int64_t>();  // the logits'
    // An encoder-decoder's prompt is its source, in the encoder's vocabulary: config.json's vocab_size
    // (Marian's separate target vocabulary is decoder_vocab_size).
    if (art.seq2seq() && fs::exists(art.dir / "config.json")) {
      const io::JsonFile config = io::JsonFile::load(file_inside(art.dir, "config.json", "config"));
      if (const auto source = io::optional_int(config, config.json, "vocab_size", 1, INT64_MAX)) vocab = *source;
    }
    for (const auto& p : prompts)
      for (int64_t id : p)
        if (id >= vocab) bad_input("--prompt-ids: token {} \u2265 vocab {} (the export's vocab_size)", id, vocab);
  }
  std::vector<const ir::Graph*> graphs;
  for (const auto& c : art.components) graphs.push_back(&c.graph);
  const auto b = pipeline::step_bounds(graphs);
  if (b.batch_max && int64_t(prompts.size()) > *b.batch_max)
    bad_input("{} prompts, the export takes at most {} (batch_size max)", prompts.size(), *b.batch_max);
  if (int64_t(prompts.size()) < b.batch_min)
    bad_input("{} prompt(s), the export takes at least {} (batch_size min): repeat --prompt-ids", prompts.size(), b.batch_min);
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const std::optional<int64_t> context = art.cache.static_cache ? std::optional<int64_t>(art.cache.max_cache_len) : b.total_max;
  if (context && int64_t(longest) + new_tokens > *context)
    bad_input("prompt {} + {} new tokens > context {} (the export's {}); use -n {} at most", longest, new_tokens, *context,
              art.cache.static_cache ? "max_cache_len" : "total_sequence_length max",
              std::max<int64_t>(0, *context - int64_t(longest)));
}

// An encoder-decoder's: the sources within the encoder's sequence bounds, the start token and the new
// ones within the decoder's total length.
void check_sources_fit(const pipeline::Artifact& art, const std::vector<std::vector<int64_t>>& sources,
                       int64_t decoder_prompt, int64_t new_tokens) {
  if (!sources.empty()) check_prompts_fit(art, sources, 0);  // ids within the vocabulary, rows within batch_size
  size_t longest = 0;
  for (const auto& p : sources) longest = std::max(longest, p.size());
  const auto source_max = pipeline::bound(art.component("encoder").graph, "encoder_sequence_length", true);
  if (source_max && int64_t(longest) > *source_max)
    bad_input("prompt of {} tokens > {} (the export's encoder_sequence_length max)", longest, *source_max);
  const auto total_max = pipeline::bound(art.decoder_steps().next->graph, "total_decoder_sequence_length", true);
  if (total_max && decoder_prompt + new_tokens > *total_max)
    bad_input("{} decoder prompt token(s) + {} new tokens > {} (the export's total_decoder_sequence_length max); use -n "
              "{} at most",
              decoder_prompt, new_tokens, *total_max, std::max<int64_t>(0, *total_max - decoder_prompt));
}

// A speech model's source: the sound file at the export's feature extractor's rate, as its log-mel
// features (preprocessor_config.json), which must have the shape the encoder takes.
runtime::Seq2SeqSources audio_source(const pipeline::Artifact& art, const fs::path& file) {
  const fs::path config = art.dir / "preprocessor_config.json";
  if (!fs::exists(config))
    bad_input("{}: no preprocessor_config.json (the feature extractor's settings, copied from the checkpoint)",
              art.dir.string());
  const audio::WhisperFeatureConfig fc = audio::read_whisper_feature_config(config);
  const audio::Sound sound = audio::load_audio(file, fc.sampling_rate);
  const audio::LogMel mel = audio::whisper_log_mel(sound.samples, fc);
  if (mel.n_mels != art.speech->mel_bins || mel.n_frames != art.speech->frames)
    bad_input("{}: features of {} mel bins x {} frames; the export's encoder takes {} x {}", config.string(), mel.n_mels,
              mel.n_frames, art.speech->mel_bins, art.speech->frames);
  return runtime::speech_sources(Tensor::from_vector<float>(DType::F32, {1, mel.n_mels, mel.n_frames}, mel.values),
                                 art.speech->encoder_length);
}

// The export's generation_config.json (an empty object when it has none).
nlohmann::json generation_config(const pipeline::Artifact& art) {
  const fs::path file = art.dir / "generation_config.json";
  nlohmann::json g = nlohmann::json::object();
  if (fs::exists(file)) g = nlohmann::json::parse(read_text_file(file), nullptr, false);
  if (g.is_discarded() || !g.is_object()) bad_input("{}: not a JSON object", file.string());
  return g;
}

}  // namespace

void register_generate(CLI::App& app, Action& action) {
  struct State {
    fs::path dir;
    std::string prompt;
    std::vector<std::string> prompt_ids;
    fs::path audio;
    std::optional<std::string> language, task;
    runtime::SamplingOptions sampling;
    bool print_ids = false;
    std::string runtime;  // empty: picked from the export's formats (pipeline/verify_runtimes.h)
  };
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand("generate", "Generate tokens from an export (reference executor, or --runtime openvino|torch|executorch): "
                                             "a decoder's continuation of the prompt, or an encoder-decoder's output for "
                                             "the prompt as its source (T5, BART, Marian: docs/seq2seq.md), or Whisper's transcription of --audio FILE.");
  cmd->add_option("out", s->dir, "Export folder (with hfx.json)")->required();
  auto* text = cmd->add_option("--prompt", s->prompt, "Prompt text (encoded with the export's tokenizer.json)");
  cmd->add_option("--prompt-ids", s->prompt_ids,
                  "Prompt as token ids 1,2,3; repeat for a batch (left-padded; an encoder-decoder's sources right-padded)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->excludes(text);
  auto* audio = cmd->add_option("--audio", s->audio,
                                "A sound file (WAV, FLAC, ... as libsndfile reads) for a speech model (Whisper): mono, "
                                "resampled and turned into log-mel features as its preprocessor_config.json says; the "
                                "first 30 s");
  audio->excludes(text);
  cmd->add_option("--language", s->language,
                  "Whisper: the language token, a code of generation_config.json's lang_to_id (en, de, ...)");
  cmd->add_option("--task", s->task, "Whisper: transcribe (the default) or translate");
  cmd->add_option("--max-new-tokens,-n", s->sampling.max_new_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", s->sampling.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", s->sampling.top_k, "Keep the k most likely tokens; 0 = off");
  cmd->add_option("--top-p", s->sampling.top_p, "Keep the smallest set with this probability mass; 1 = off");
  cmd->add_option("--seed", s->sampling.seed, "Random seed for sampling")->capture_default_str();
  cmd->add_option("--runtime", s->runtime,
                  "reference (the onnx graphs on hfx's executor) | openvino (openvino/*.xml on OpenVINO's CPU plugin, "
                  "f32) | torch (pt2/*.pt2 through torch.export.load) | executorch (executorch/*.pte through ExecuTorch's "
                  "runtime). Default: reference for an export with onnx "
                  "files, else the runtime of its format (as hfx verify picks it)");
  cmd->add_flag("--print-ids", s->print_ids, "Print each row's new token ids (comma separated, one row a line)");
  cmd->callback([s, text, audio, cmd, &action] {
    action = [s, text, audio, cmd] {
      check_sampling_flags(s->sampling);
      if (s->sampling.temperature == 0)  // F#13: greedy decoding reads none of the sampling options
        for (const char* flag : {"--top-k", "--top-p", "--seed"})
          if (cmd->count(flag)) fmt::print(stderr, "hfx: note: {} only applies to sampling (--temperature > 0); ignored\n", flag);
      if (text->count() && s->prompt.empty()) usage_error("--prompt is empty: give some text (or --prompt-ids 1,2,3)");
      if (s->prompt_ids.empty() && !text->count() && !audio->count())
        usage_error("give --prompt TEXT or --prompt-ids 1,2,3 (or --audio FILE for a speech model)");
      if (audio->count() && !s->prompt_ids.empty()) usage_error("--audio and --prompt-ids: give one source");
      std::vector<std::vector<int64_t>> prompts;
      for (const auto& p : s->prompt_ids) prompts.push_back(as_usage([&] { return parse_id_list(p, "--prompt-ids"); }));
      if (!fs::is_directory(s->dir)) bad_input("{}: no such export folder", s->dir.string());
      if (s->runtime.empty()) s->runtime = pipeline::default_runtime(s->dir);  // F#8: an OpenVINO-only export runs on openvino
      const pipeline::Backend& backend = pipeline::backend_for_runtime(s->runtime);
      auto art = pipeline::open_artifact(s->dir, backend.info().name);
      const tasks::Task* task = tasks::find_task(art.manifest["model"].value("task", "causal-lm"));
      if (!task || (!task->generative() && !art.seq2seq()))
        bad_input("{}: a {} export has no decode loop; generate needs a decoder or an encoder-decoder", s->dir.string(),
                  art.manifest["model"].value("task", "?"));
      std::optional<tokenizer::Tokenizer> tok;
      // Loaded from the folder: Tokenizer::load refuses a tokenizer.json that links outside the export.
      if (fs::exists(s->dir / "tokenizer.json") || fs::exists(s->dir / "source.spm")) tok = tokenizer::Tokenizer::load(s->dir);
      if (!s->prompt.empty()) {
        if (!tok) bad_input("{}: --prompt needs tokenizer.json (or Marian's source.spm) in the export; use --prompt-ids", s->dir.string());
        prompts.push_back(tok->encode(s->prompt, true));
      }
      if (art.seq2seq() && s->runtime == "onnxruntime")
        unsupported("onnx: the onnxruntime runtime runs through `hfx verify --runtime onnxruntime` (python driver), not "
                    "as a step runner here; `python python/hfx_ort_seq2seq.py {} --prompt-ids 1,2,3` generates an "
                    "encoder-decoder with ONNX Runtime",
                    s->dir.string());
      if (audio->count() && !art.speech)
        bad_input("{}: --audio is for a speech model (Whisper); this export's encoder reads token ids: use --prompt",
                  s->dir.string());
      if (art.speech && !audio->count())
        bad_input("{}: a speech model (Whisper) transcribes a sound file: give --audio FILE.wav", s->dir.string());
      if (!art.speech && (s->language || s->task))
        bad_input("--language and --task are Whisper's; {} is not a speech model", s->dir.string());
      auto opts = s->sampling;
      opts.eos_token_ids = art.eos_token_ids;
      opts.pad_token_id = art.pad_token_id;
      std::vector<int64_t> decoder_prompt;
      if (art.seq2seq()) decoder_prompt = {*art.decoder_start_token_id};
      const std::string config_file = (s->dir / "generation_config.json").string();
      const int64_t vocab = art.manifest["model"].value("vocab_size", int64_t(0));
      if (art.speech) {
        runtime::WhisperDecoding w = runtime::whisper_decoding(generation_config(art), config_file,
                                                               *art.decoder_start_token_id, s->language, s->task, vocab);
        decoder_prompt = w.prompt;
        opts.suppress_tokens = w.suppress_tokens;
        opts.begin_suppress_tokens = w.begin_suppress_tokens;
      } else if (art.seq2seq()) {
        runtime::apply_text_generation_rules(generation_config(art), config_file, vocab, opts);
      }
      if (art.seq2seq()) check_sources_fit(art, prompts, int64_t(decoder_prompt.size()), s->sampling.max_new_tokens);
      else check_prompts_fit(art, prompts, s->sampling.max_new_tokens);
      const bool split = art.components.size() > 1;
      for (const auto& c : art.components) pipeline::check_declared_outputs(art, c);
      // The reference executor runs the graphs under a per-tensor budget from their contract at this
      // run's sizes (the prompts, plus the new tokens or the static cache), so a graph computing a
      // huge tensor fails naming its node instead of taking the machine's memory.
      size_t longest = art.speech ? size_t(art.speech->frames) : 0;
      for (const auto& p : prompts) longest = std::max(longest, p.size());
      const int64_t batch = art.speech ? 1 : int64_t(prompts.size());
      const int64_t length = std::max<int64_t>(int64_t(longest) + std::max<int64_t>(opts.max_new_tokens, 0),
                                               art.cache.static_cache ? art.cache.max_cache_len : 0);
      auto make_runner = [&](const pipeline::ArtifactComponent& c) {
        if (s->runtime == "reference")
          return runtime::make_executor_runner(c.graph, pipeline::artifact_exec_options(c, batch, length));
        return backend.make_runner(c, s->runtime);
      };
      // A decoder's steps (decoder, or prefill + decode), or an encoder-decoder's three graphs.
      // onnxruntime-genai's encoder-decoder layout has no first-step decoder (null: the loop runs
      // decoder_with_past from an empty past); OpenVINO's stateful one has one merged decoder, which
      // holds the state, for both steps.
      const auto steps = art.seq2seq() ? art.decoder_steps() : pipeline::Artifact::DecoderSteps{};
      const pipeline::ArtifactComponent* first_step = art.seq2seq() ? steps.first : &art.component(split ? "prefill" : "");
      auto first = first_step ? make_runner(*first_step) : nullptr;
      auto next = art.seq2seq() ? (steps.next == steps.first ? nullptr : make_runner(*steps.next))
                  : split       ? make_runner(art.component("decode"))
                                : nullptr;
      auto encoder = art.seq2seq() ? make_runner(art.component("encoder")) : nullptr;
      // Stream a single row as it comes: text when there is a tokenizer, ids otherwise. Text is
      // re-decoded from all new ids each time and only the new suffix printed, so multi-byte
      // characters split over tokens come out whole.
      const bool stream = !s->print_ids && batch == 1;
      std::vector<int64_t> so_far;
      std::string printed;
      auto on_token = [&](size_t, int64_t id) {
        if (!stream) return;
        if (!tok) {
          fmt::print("{} ", id);
        } else {
          so_far.push_back(id);
          std::string text = tok->decode(so_far, true);
          if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
            fmt::print("{}", text.substr(printed.size()));
            printed = text;
          }
        }
        std::fflush(stdout);
      };
      auto rows = encoder ? runtime::generate_seq2seq({*encoder, first.get(), next ? *next : *first,
                                                       runtime::input_ids_dtype(steps.next->graph)},
                                                      art.cache,
                                                      art.speech ? audio_source(art, s->audio)
                                                                 : runtime::text_sources(prompts, opts.pad_token_id),
                                                      decoder_prompt, opts, on_token)
                          : runtime::generate(*first, next ? *next : *first, art.cache, prompts, opts, on_token);
      if (stream) fmt::print("\n");
      else
        for (const auto& r : rows) fmt::print("{}\n", fmt::join(r, ","));
      return 0;
    };
  });
}

}  // namespace hfx::cli
