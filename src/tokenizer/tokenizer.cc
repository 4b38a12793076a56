// tokenizer.json: loading, added tokens, the encode pipeline (added tokens -> normalizer ->
// pre-tokenizer -> model -> truncation -> post-processor -> padding) and decoding, following
// tokenizers/src/tokenizer/{mod.rs,added_vocabulary.rs}.
#include "tokenizer/tokenizer.h"

#include <map>
#include <unordered_set>

#include "core/error.h"
#include "core/safe_path.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/stages.h"

namespace hfx::tokenizer {

namespace fs = std::filesystem;

// ---- the tokenizer

namespace {

// The longest padding a tokenizer.json may ask for (padding.strategy.Fixed, pad_to_multiple_of): 2^20
// ids, past the contexts hfx exports; the padded ids are allocated whole, so a file's 2^62 would
// otherwise be an allocation sized by the file.
constexpr int64_t kMaxPaddedLength = int64_t(1) << 20;

struct AddedToken {
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
  bool operator==(const AddedToken&) const = default;
};

// Leftmost-longest matching of the added tokens (aho-corasick's MatchKind::LeftmostLongest).
class Trie {
 public:
  void add(const std::u32string& pattern, int64_t id) {
    if (pattern.empty()) return;
    size_t node = 0;
    for (char32_t c : pattern) {
      auto [it, inserted] = nodes_[node].next.try_emplace(c, nodes_.size());
      if (inserted) nodes_.emplace_back();
      node = it->second;
    }
    if (nodes_[node].id < 0) nodes_[node].id = id;  // the first of equal patterns wins
  }
  bool empty() const { return nodes_.size() == 1; }
  // Longest pattern starting at s[i]: (length, id), or length 0.
  std::pair<size_t, int64_t> longest_at(const std::u32string& s, size_t i) const {
    size_t node = 0, best = 0;
    int64_t id = -1;
    for (size_t k = i; k < s.size(); ++k) {
      auto it = nodes_[node].next.find(s[k]);
      if (it == nodes_[node].next.end()) break;
      node = it->second;
      if (nodes_[node].id >= 0) {
        best = k + 1 - i;
        id = nodes_[node].id;
      }
    }
    return {best, id};
  }

 private:
  struct TrieNode {
    std::map<char32_t, size_t> next;
    int64_t id = -1;
  };
  std::vector<TrieNode> nodes_{1};
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual size_t added_tokens() const = 0;  // for a single sequence
  virtual void process(std::vector<int64_t>& ids) const = 0;
};

class Wrap : public PostProcessor {  // BertProcessing, RobertaProcessing: cls $A sep
 public:
  Wrap(int64_t cls, int64_t sep) : cls_(cls), sep_(sep) {}
  size_t added_tokens() const override { return 2; }
  void process(std::vector<int64_t>& ids) const override {
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
  }

 private:
  int64_t cls_, sep_;
};

class Template : public PostProcessor {
 public:
  // Each item is a list of special ids, or nullopt for the sequence itself.
  explicit Template(std::vector<std::optional<std::vector<int64_t>>> items) : items_(std::move(items)) {}
  size_t added_tokens() const override {
    size_t n = 0;
    for (const auto& it : items_) n += it ? it->size() : 0;
    return n;
  }
  void process(std::vector<int64_t>& ids) const override {
    std::vector<int64_t> out;
    out.reserve(ids.size() + added_tokens());
    for (const auto& it : items_) {
      if (it)
        out.insert(out.end(), it->begin(), it->end());
      else
        out.insert(out.end(), ids.begin(), ids.end());
    }
    ids = std::move(out);
  }

 private:
  std::vector<std::optional<std::vector<int64_t>>> items_;
};

class NoOp : public PostProcessor {  // ByteLevel: offsets only
 public:
  size_t added_tokens() const override { return 0; }
  void process(std::vector<int64_t>&) const override {}
};

class ProcessorSequence : public PostProcessor {
 public:
  explicit ProcessorSequence(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  size_t added_tokens() const override {
    size_t n = 0;
    for (const auto& s : steps_) n += s->added_tokens();
    return n;
  }
  void process(std::vector<int64_t>& ids) const override {
    for (const auto& s : steps_) s->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

std::pair<std::string, int64_t> name_and_id(const Node& node) {
  const json& v = node.value();
  if (!node.present() || !v.is_array() || v.size() != 2 || !v[0].is_string()) node.wrong("a pair [\"token\", id]");
  return {v[0].get<std::string>(), node[1].integer(0, UINT32_MAX)};
}

std::unique_ptr<PostProcessor> make_post_processor(const Node& node) {
  std::string type = node.type();
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return std::make_unique<Wrap>(name_and_id(node["cls"]).second, name_and_id(node["sep"]).second);
  if (type == "ByteLevel") return std::make_unique<NoOp>();
  if (type == "TemplateProcessing") {
    Node single = node["single"];
    Node specials = node["special_tokens"];
    std::vector<std::optional<std::vector<int64_t>>> items;
    for (size_t i = 0; i < single.array().size(); ++i) {
      Node item = single[i];
      if (item["Sequence"].present()) {
        items.push_back(std::nullopt);
      } else if (item["SpecialToken"].present()) {
        std::string id = item["SpecialToken"]["id"].str();
        Node spec = specials[id];
        if (!spec.present()) item["SpecialToken"]["id"].wrong("a token listed in special_tokens");
        std::vector<int64_t> ids;
        for (size_t k = 0; k < spec["ids"].array().size(); ++k) ids.push_back(spec["ids"][k].integer(0, UINT32_MAX));
        items.push_back(std::move(ids));
      } else {
        item.wrong("{\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    return std::make_unique<Template>(std::move(items));
  }
  if (type == "Sequence") {
    Node list = node["processors"];
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < list.array().size(); ++i) steps.push_back(make_post_processor(list[i]));
    return std::make_unique<ProcessorSequence>(std::move(steps));
  }
  node["type"].unsupported_value("post-processor");
}

bool is_left(const Node& direction) {
  std::string d = direction.str_or("Right");
  if (d != "Left" && d != "Right") direction.wrong("Left or Right");
  return d == "Left";
}

}  // namespace

struct Tokenizer::Impl {
  JsonFile file;
  bool strip_decoded = false;  // decoded text loses its surrounding whitespace (Marian's)
  bool marian_language_code = false;  // a leading ">>xx<<" is one token (Tokenizer::encode)
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;

  std::vector<AddedToken> added;                   // by their order in the file
  std::unordered_map<std::string, int64_t> added_ids;
  std::unordered_map<int64_t, AddedToken> added_by_id;
  std::unordered_set<std::string> special_contents;  // skipped by decode(skip_special_tokens)
  // What decode() and id_to_token() give for an added token: its content, normalized when the token
  // is matched normalized (tokenizers does the same; such a special token is then not skipped).
  std::unordered_map<int64_t, std::string> added_text;
  Trie raw_trie, normalized_trie;                  // normalized: false / true

  struct Truncation {
    int64_t max_length;
    bool left, only_second;
  };
  std::optional<Truncation> truncation;
  struct Padding {
    std::optional<int64_t> fixed, multiple;
    int64_t pad_id;
    bool left;
  };
  std::optional<Padding> padding;

  std::optional<int64_t> token_to_id(std::string_view token) const {
    auto it = added_ids.find(std::string(token));
    if (it != added_ids.end()) return it->second;
    return model->token_to_id(token);
  }

  const std::string* added_token_text(int64_t id) const {
    auto it = added_by_id.find(id);
    if (it == added_by_id.end()) return nullptr;
    auto norm = added_text.find(id);
    return norm != added_text.end() ? &norm->second : &it->second.content;
  }

  void load_added_tokens(const Node& list);
  void split_added(const Trie& trie, Pieces& pieces) const;
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const;
};

void Tokenizer::Impl::load_added_tokens(const Node& list) {
  if (!list.present()) return;
  std::vector<AddedToken> specials, classics;
  auto& special_set = special_contents;
  int64_t max_added = -1;
  for (size_t i = 0; i < list.array().size(); ++i) {
    Node n = list[i];
    n.object();
    AddedToken t;
    t.content = n["content"].str();
    t.single_word = n["single_word"].boolean_or(false);
    t.lstrip = n["lstrip"].boolean_or(false);
    t.rstrip = n["rstrip"].boolean_or(false);
    t.special = n["special"].boolean_or(false);
    t.normalized = n["normalized"].boolean_or(!t.special);
    if (!unicode::is_valid_utf8(t.content)) n["content"].wrong("valid UTF-8");
    // AddedVocabulary::add_tokens, one token at a time as the deserializer does: ids are assigned
    // here (the file's "id" is only checked against them by tokenizers, with a warning).
    if (t.content.empty()) continue;
    if (t.special && special_set.insert(t.content).second) specials.push_back(t);
    if (auto same = added_ids.find(t.content); same != added_ids.end()) {
      auto old = added_by_id.find(same->second);
      if (old != added_by_id.end() && old->second == t) continue;  // the very same token twice
    }
    int64_t id;
    if (auto existing = token_to_id(t.content)) {
      id = *existing;
    } else {
      int64_t vs = model->vocab_size();
      id = max_added < 0 ? vs : (max_added >= vs || vs == 0) ? max_added + 1 : vs;
    }
    max_added = std::max(max_added, id);
    added_ids[t.content] = id;
    added_by_id[id] = t;
    if (!special_set.count(t.content)) classics.push_back(t);
  }
  // refresh_added_tokens: special tokens first, then the others; normalized ones are matched
  // against the normalized text, in their normalized spelling.
  for (const auto* group : {&specials, &classics}) {
    for (const auto& t : *group) {
      int64_t id = *token_to_id(t.content);
      std::u32string content = unicode::from_utf8(t.content);
      if (t.normalized) {
        if (normalizer) normalizer->normalize(content);
        normalized_trie.add(content, id);
        added_text[id] = unicode::to_utf8(content);
      } else {
        raw_trie.add(content, id);
      }
      added.push_back(t);
    }
  }
}

// AddedVocabulary::find_matches + split_with_indices on every piece that is not a token yet.
void Tokenizer::Impl::split_added(const Trie& trie, Pieces& pieces) const {
  if (trie.empty()) return;
  Pieces out;
  out.reserve(pieces.size());
  for (auto& p : pieces) {
    if (p.id >= 0 || p.text.empty()) {
      out.push_back(std::move(p));
      continue;
    }
    const std::u32string& s = p.text;
    auto is_word = [](char32_t c) { return unicode::has(c, unicode::kWord); };
    auto is_space = [](char32_t c) { return unicode::has(c, unicode::kWhiteSpace); };
    size_t start_offset = 0;
    auto emit = [&](size_t b, size_t e, int64_t id) {
      out.push_back(Piece{s.substr(b, e - b), id, p.at_start && b == 0});
    };
    for (size_t i = 0; i < s.size();) {
      auto [len, id] = trie.longest_at(s, i);
      if (!len) {
        ++i;
        continue;
      }
      size_t start = i, stop = i + len;
      i = stop;
      const AddedToken& t = added_by_id.at(id);
      if (t.single_word) {
        bool start_space = start == 0 || !is_word(s[start - 1]);
        bool stop_space = stop == s.size() || !is_word(s[stop]);
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t b = start;
        while (b > 0 && is_space(s[b - 1])) --b;
        start = std::max(b, start_offset);
      }
      if (t.rstrip)
        while (stop < s.size() && is_space(s[stop])) ++stop;
      if (start_offset < start) emit(start_offset, start, -1);
      emit(start, stop, id);
      start_offset = stop;
    }
    if (start_offset != s.size()) emit(start_offset, s.size(), -1);
  }
  pieces = std::move(out);
}

std::vector<int64_t> Tokenizer::Impl::encode(std::string_view text, bool add_special_tokens) const {
  Pieces pieces;
  pieces.push_back(Piece{unicode::from_utf8(text), -1, true});
  split_added(raw_trie, pieces);
  // Normalize each remaining piece on its own, then split out the normalized added tokens.
  Pieces normalized;
  for (auto& p : pieces) {
    if (p.id < 0 && normalizer) normalizer->normalize(p.text);
    if (p.id >= 0 || !p.text.empty()) normalized.push_back(std::move(p));
  }
  split_added(normalized_trie, normalized);
  std::erase_if(normalized, [](const Piece& p) { return p.id < 0 && p.text.empty(); });
  if (pre_tokenizer) pre_tokenizer->apply(normalized);

  std::vector<int64_t> ids;
  ids.reserve(text.size() / 2 + 4);
  for (const auto& p : normalized) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      model->tokenize(unicode::to_utf8(p.text), ids);
  }

  if (truncation) {
    int64_t max_len = truncation->max_length;
    size_t extra = add_special_tokens && post_processor ? post_processor->added_tokens() : 0;
    if (max_len < int64_t(extra))
      bad_input("{}: field \"truncation.max_length\": {} is smaller than the {} special tokens added",
                file.path.string(), max_len, extra);
    size_t keep = size_t(max_len) - extra;
    if (truncation->only_second)
      bad_input("{}: field \"truncation.strategy\": OnlySecond needs a second sequence", file.path.string());
    if (ids.size() > keep) {
      if (truncation->left)
        ids.erase(ids.begin(), ids.end() - ptrdiff_t(keep));
      else
        ids.resize(keep);
    }
  }
  if (add_special_tokens && post_processor) post_processor->process(ids);
  if (padding) {
    size_t target = padding->fixed ? size_t(*padding->fixed) : ids.size();
    if (padding->multiple && *padding->multiple > 0 && target % size_t(*padding->multiple))
      target += size_t(*padding->multiple) - target % size_t(*padding->multiple);
    if (ids.size() < target) {
      if (padding->left)
        ids.insert(ids.begin(), target - ids.size(), padding->pad_id);
      else
        ids.resize(target, padding->pad_id);
    }
  }
  return ids;
}

Tokenizer Tokenizer::load(const fs::path& path) {
  fs::path file = path;
  std::error_code ec;
  auto impl = std::make_shared<Impl>();
  if (fs::is_directory(path, ec)) {
    // A folder (an export, a model folder) is someone else's: its tokenizer.json must be a regular
    // file inside it, not a link to elsewhere. A file named directly is the user's own choice; the
    // read below refuses FIFOs and devices either way and caps the size (kMaxTokenizerBytes).
    const bool has_json = fs::exists(fs::symlink_status(path / "tokenizer.json", ec));
    // Marian ships no tokenizer.json: its source.spm and vocab.json make the same pipeline.
    const bool marian = !has_json && fs::exists(fs::symlink_status(path / "source.spm", ec)) &&
                        fs::exists(fs::symlink_status(path / "vocab.json", ec));
    if (!has_json && !marian)
      bad_input("{}: no tokenizer.json in this folder (nor Marian's source.spm + vocab.json)", path.string());
    if (marian) {
      impl->file = JsonFile{path / "source.spm", marian_tokenizer_json(path)};
      impl->strip_decoded = true;  // MarianTokenizer.convert_tokens_to_string ends in .strip()
      impl->marian_language_code = true;
      return from_impl(std::move(impl));
    }
    file = file_inside(path, "tokenizer.json", "tokenizer");
  }
  impl->file = JsonFile::load(file, kMaxTokenizerBytes);
  return from_impl(std::move(impl));
}

Tokenizer Tokenizer::from_impl(std::shared_ptr<Impl> impl) {
  const JsonFile& f = impl->file;
  Node root(f, &f.json, "");

  if (root["version"].present() && root["version"].str() != "1.0")
    root["version"].unsupported_value("tokenizer.json version");
  impl->model = make_model(root["model"]);
  if (root["normalizer"].present()) impl->normalizer = make_normalizer(root["normalizer"]);
  if (root["pre_tokenizer"].present()) impl->pre_tokenizer = make_pre_tokenizer(root["pre_tokenizer"]);
  if (root["post_processor"].present()) impl->post_processor = make_post_processor(root["post_processor"]);
  if (root["decoder"].present()) impl->decoder = make_decoder(root["decoder"]);
  impl->load_added_tokens(root["added_tokens"]);

  if (Node t = root["truncation"]; t.present()) {
    t.object();
    std::string strategy = t["strategy"].str_or("LongestFirst");
    if (strategy != "LongestFirst" && strategy != "OnlyFirst" && strategy != "OnlySecond")
      t["strategy"].wrong("LongestFirst, OnlyFirst or OnlySecond");
    impl->truncation = Impl::Truncation{t["max_length"].integer(0), is_left(t["direction"]), strategy == "OnlySecond"};
  }
  if (Node p = root["padding"]; p.present()) {
    p.object();
    Impl::Padding pad{};
    Node strategy = p["strategy"];
    if (strategy.present() && strategy.value().is_object()) {
      pad.fixed = strategy["Fixed"].integer(0, kMaxPaddedLength);
    } else if (strategy.present() && strategy.str() != "BatchLongest") {
      strategy.wrong("\"BatchLongest\" or {\"Fixed\": n}");
    }
    pad.multiple = p["pad_to_multiple_of"].integer_opt(0, kMaxPaddedLength);
    pad.pad_id = p["pad_id"].integer_opt(0, UINT32_MAX).value_or(0);
    pad.left = is_left(p["direction"]);
    impl->padding = pad;
  }
  impl->file.json = json();  // everything is built: free the document (tens of MB for large vocabularies)
  return Tokenizer(std::move(impl));
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  // A multi-target Marian model reads the target language as a leading ">>fra<<", which
  // MarianTokenizer.remove_language_code takes off before SentencePiece and looks up in vocab.json
  // (<unk> when absent).
  if (impl_->marian_language_code && text.substr(0, 2) == ">>")
    if (const size_t end = text.find("<<"); end != std::string_view::npos) {
      const std::string_view code = text.substr(0, end + 2);
      auto ids = impl_->encode(text.substr(end + 2), add_special_tokens);
      const auto id = impl_->model->token_to_id(code);
      ids.insert(ids.begin(), id ? *id : *impl_->model->token_to_id("<unk>"));
      return ids;
    }
  return impl_->encode(text, add_special_tokens);
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    const std::string* token = impl_->added_token_text(id);
    if (!token) token = impl_->model->id_to_token(id);
    if (!token) continue;
    if (skip_special_tokens && impl_->special_contents.count(*token)) continue;
    tokens.push_back(*token);
  }
  if (impl_->decoder) {
    impl_->decoder->decode_chain(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    if (impl_->strip_decoded) {
      const size_t first = out.find_first_not_of(" \t\n\r\f\v"), last = out.find_last_not_of(" \t\n\r\f\v");
      out = first == std::string::npos ? std::string() : out.substr(first, last - first + 1);
    }
    return out;
  }
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += ' ';
    out += tokens[i];
  }
  return out;
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  if (const std::string* t = impl_->added_token_text(id)) return *t;
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  return std::nullopt;
}

int64_t Tokenizer::vocab_size() const {
  int64_t n = impl_->model->vocab_size();
  for (const auto& [content, id] : impl_->added_ids)
    if (!impl_->model->token_to_id(content)) ++n;
  return n;
}

const fs::path& Tokenizer::path() const { return impl_->file.path; }

}  // namespace hfx::tokenizer
