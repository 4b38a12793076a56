#include "runtime/generation_rules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace hfx::runtime {

namespace {

// An id of the config, checked against the vocabulary.
int64_t token_id(const nlohmann::json& v, const std::string& file, const std::string& key, int64_t vocab) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
    bad_input("{}: {}: expected a token id below the vocabulary ({}), found {}", file, key, vocab, v.dump());
  return v.get<int64_t>();
}

std::vector<int64_t> id_list(const nlohmann::json& g, const std::string& file, const std::string& key, int64_t vocab) {
  std::vector<int64_t> out;
  if (!g.contains(key) || g[key].is_null()) return out;
  if (!g[key].is_array()) bad_input("{}: {}: expected a list of token ids, found {}", file, key, g[key].dump());
  for (const auto& v : g[key]) out.push_back(token_id(v, file, key, vocab));
  return out;
}

// `name` -> id of the config's map `key` (lang_to_id, task_to_id).
std::optional<int64_t> lookup(const nlohmann::json& g, const std::string& file, const std::string& key,
                              const std::string& name, int64_t vocab) {
  if (!g.contains(key) || !g[key].is_object()) return std::nullopt;
  auto it = g[key].find(name);
  if (it == g[key].end()) return std::nullopt;
  return token_id(*it, file, key + "." + name, vocab);
}

std::vector<std::string> names_of(const nlohmann::json& g, const std::string& key) {
  std::vector<std::string> out;
  if (g.contains(key) && g[key].is_object())
    for (const auto& [k, v] : g[key].items()) out.push_back(k);
  return out;
}

}  // namespace

void apply_text_generation_rules(const nlohmann::json& g, const std::string& file, int64_t vocab,
                                 SamplingOptions& o) {
  if (g.contains("bad_words_ids") && !g["bad_words_ids"].is_null()) {
    if (!g["bad_words_ids"].is_array()) bad_input("{}: bad_words_ids: expected a list of token id lists", file);
    for (const auto& word : g["bad_words_ids"]) {
      if (!word.is_array() || word.size() != 1)
        unsupported("{}: bad_words_ids {}: hfx applies bad words of one token only", file, word.dump());
      o.suppress_tokens.push_back(token_id(word[0], file, "bad_words_ids", vocab));
    }
  }
  for (const auto& [key, slot] : {std::pair{"forced_bos_token_id", &o.forced_first_token},
                                  std::pair{"forced_eos_token_id", &o.forced_last_token}})
    if (g.contains(key) && !g[key].is_null()) {
      // A list of EOS ids forces the first of them, as ForcedEOSTokenLogitsProcessor does.
      // A list of EOS ids: each gets score 0 and every other -inf, so argmax picks the lowest.
      if (g[key].is_array() && !g[key].empty()) {
        for (const auto& v : g[key]) {
          const int64_t id = token_id(v, file, key, vocab);
          *slot = *slot ? std::min(**slot, id) : id;
        }
      } else {
        *slot = token_id(g[key], file, key, vocab);
      }
    }
}

WhisperDecoding whisper_decoding(const nlohmann::json& g, const std::string& file, int64_t start,
                                 const std::optional<std::string>& language, const std::optional<std::string>& task,
                                 int64_t vocab) {
  WhisperDecoding d;
  d.prompt = {start};
  // Older configs force the prompt's positions 1, 2, ... (a null language: detect it).
  bool language_open = true;
  if (!language && !task && g.contains("forced_decoder_ids") && g["forced_decoder_ids"].is_array()) {
    int64_t position = 1;
    for (const auto& pair : g["forced_decoder_ids"]) {
      if (!pair.is_array() || pair.size() != 2 || pair[0] != position)
        bad_input("{}: forced_decoder_ids: expected [[1, id], [2, id], ...] (Whisper's prompt pattern), found {}", file,
                  g["forced_decoder_ids"].dump());
      if (pair[1].is_null()) d.prompt.push_back(-1);  // the language, to be given
      else d.prompt.push_back(token_id(pair[1], file, "forced_decoder_ids", vocab));
      ++position;
    }
    language_open = d.prompt.size() <= 1 || d.prompt[1] < 0;
  }
  const bool multilingual = g.contains("lang_to_id") && g["lang_to_id"].is_object() && !g["lang_to_id"].empty();
  if (language) {
    const std::string token = language->rfind("<|", 0) == 0 ? *language : fmt::format("<|{}|>", *language);
    const auto id = lookup(g, file, "lang_to_id", token, vocab);
    if (!id)
      bad_input("--language {}: {} has no {} in lang_to_id (its languages: {})", *language, file, token,
                fmt::join(names_of(g, "lang_to_id"), " "));
    if (d.prompt.size() > 1) d.prompt[1] = *id;
    else d.prompt.push_back(*id);
  } else if (multilingual && language_open) {
    bad_input("{} is multilingual and names no language: give --language (for example --language en); hfx does not "
              "detect the language",
              file);
  }
  if (std::find(d.prompt.begin(), d.prompt.end(), -1) != d.prompt.end())
    bad_input("{}: forced_decoder_ids leaves the language open: give --language", file);
  std::vector<int64_t> task_ids;
  for (const auto& name : names_of(g, "task_to_id")) task_ids.push_back(*lookup(g, file, "task_to_id", name, vocab));
  auto is_task = [&](int64_t id) { return std::find(task_ids.begin(), task_ids.end(), id) != task_ids.end(); };
  if (task) {
    const auto id = lookup(g, file, "task_to_id", *task, vocab);
    if (!id) bad_input("--task {}: {} has no such task in task_to_id (its tasks: {})", *task, file,
                       fmt::join(names_of(g, "task_to_id"), " "));
    // replace_or_add: a task token already in the prompt is replaced.
    auto it = std::find_if(d.prompt.begin(), d.prompt.end(), is_task);
    if (it != d.prompt.end()) *it = *id;
    else d.prompt.push_back(*id);
  } else if (language && !task_ids.empty() && std::none_of(d.prompt.begin(), d.prompt.end(), is_task)) {
    if (auto id = lookup(g, file, "task_to_id", "transcribe", vocab)) d.prompt.push_back(*id);
  }
  if (g.contains("no_timestamps_token_id") && !g["no_timestamps_token_id"].is_null()) {
    const int64_t none = token_id(g["no_timestamps_token_id"], file, "no_timestamps_token_id", vocab);
    if (d.prompt.back() != none) d.prompt.push_back(none);
  }
  d.suppress_tokens = id_list(g, file, "suppress_tokens", vocab);
  d.begin_suppress_tokens = id_list(g, file, "begin_suppress_tokens", vocab);
  return d;
}

}  // namespace hfx::runtime
