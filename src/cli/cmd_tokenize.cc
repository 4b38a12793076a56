// `hfx tokenize`: one input a line on stdin, one JSON result a line on stdout.
//   encode (default): a line of text (or, with --jsonl, a JSON string) -> a JSON array of ids
//   --decode:         a JSON array of ids -> a JSON string
//   --text / --ids:   one input from the command line instead of stdin
#include "cli/cmd_tokenize.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace hfx::cli {

namespace {

struct State {
  fs::path tokenizer;
  bool decode = false, jsonl = false, add_special_tokens = true, keep_special_tokens = false;
  std::string ids, text;
  bool has_text = false;
};

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_ids(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

void emit(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
}

std::vector<int64_t> parse_ids_line(const std::string& line, size_t lineno) {
  nlohmann::json v = nlohmann::json::parse(line, nullptr, false);
  auto wrong = [&] {
    std::string found = line.size() > 60 ? line.substr(0, 57) + "..." : line;
    bad_input("stdin line {}: expected a JSON array of token ids, found {}", lineno, found);
  };
  if (v.is_discarded() || !v.is_array()) wrong();
  std::vector<int64_t> ids;
  ids.reserve(v.size());
  for (const auto& x : v) {
    if (!x.is_number_integer()) wrong();
    if (x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX)) wrong();
    ids.push_back(x.get<int64_t>());
  }
  return ids;
}

std::string parse_text_line(const std::string& line, size_t lineno) {
  nlohmann::json v = nlohmann::json::parse(line, nullptr, false);
  if (v.is_discarded() || !v.is_string()) {
    std::string found = line.size() > 60 ? line.substr(0, 57) + "..." : line;
    bad_input("stdin line {}: expected a JSON string (--jsonl), found {}", lineno, found);
  }
  return v.get<std::string>();
}

int run(const State& s) {
  auto tok = tokenizer::Tokenizer::load(s.tokenizer);
  const bool skip_special = !s.keep_special_tokens;
  if (!s.ids.empty()) {
    emit(json_string(tok.decode(parse_id_list(s.ids, "--ids"), skip_special)));
    return 0;
  }
  if (s.has_text) {
    emit(json_ids(tok.encode(s.text, s.add_special_tokens)));
    return 0;
  }
  std::string line;
  size_t lineno = 0;
  while (std::getline(std::cin, line)) {
    ++lineno;
    if (s.decode) {
      emit(json_string(tok.decode(parse_ids_line(line, lineno), skip_special)));
    } else {
      std::string text = s.jsonl ? parse_text_line(line, lineno) : line;
      with_context(fmt::format("stdin line {}", lineno), [&] { emit(json_ids(tok.encode(text, s.add_special_tokens))); });
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, Action& action) {
  auto s = std::make_shared<State>();
  auto* cmd = app.add_subcommand(
      "tokenize", "Encode text to token ids (or decode ids to text) with a tokenizer.json, like `tokenizers`.");
  cmd->add_option("--tokenizer,-t", s->tokenizer, "tokenizer.json, or a folder holding one")->required();
  auto* decode = cmd->add_flag("--decode,-d", s->decode, "Decode: read JSON arrays of ids, print JSON strings");
  auto* ids = cmd->add_option("--ids", s->ids, "Decode these comma-separated ids (instead of stdin)");
  auto* text = cmd->add_option("--text", s->text, "Encode this text (instead of stdin)")->excludes(decode)->excludes(ids);
  cmd->add_flag("--add-special-tokens,!--no-special-tokens", s->add_special_tokens,
                "Encode: add the post-processor's special tokens ([CLS], <s>, ...); default on");
  cmd->add_flag("--keep-special-tokens", s->keep_special_tokens, "Decode: keep special tokens in the text");
  cmd->add_flag("--jsonl", s->jsonl, "Encode: each stdin line is a JSON string (for newlines and any Unicode)");
  cmd->footer(
      "Examples:\n"
      "  echo 'Hello world' | hfx tokenize -t ./model              # [9906,1917]\n"
      "  hfx tokenize -t ./model --ids 9906,1917                    # \"Hello world\"\n"
      "  printf '%s\\n' '\"a\\\\nb\"' | hfx tokenize -t ./model --jsonl\n");
  cmd->callback([s, text, &action] {
    s->has_text = text->count() > 0;
    action = [s] { return run(*s); };
  });
}

}  // namespace hfx::cli
