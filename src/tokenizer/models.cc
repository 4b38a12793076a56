// Models of tokenizer.json: BPE (tokenizers/src/models/bpe), WordPiece, WordLevel and Unigram
// (tokenizers/src/models/unigram).
#include <algorithm>
#include <limits>
#include <queue>

#include "core/error.h"
#include "tokenizer/stages.h"

namespace hfx::tokenizer {

std::optional<int64_t> Model::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Model::id_to_token(int64_t id) const {
  auto it = vocab_r_.find(id);
  return it == vocab_r_.end() ? nullptr : &it->second;
}

void Model::set_vocab(const Node& node) {
  if (!node.present() || !node.value().is_object()) node.wrong("an object {\"token\": id, ...}");
  vocab_.reserve(node.value().size());
  vocab_r_.reserve(node.value().size());
  for (const auto& [token, id] : node.value().items()) {
    int64_t v;
    if (id.is_number_unsigned() && id.get<uint64_t>() <= UINT32_MAX) {
      v = int64_t(id.get<uint64_t>());
    } else {
      Node entry(node.file(), &id, node.path() + "[" + nlohmann::json(token).dump() + "]");
      v = entry.integer(0, UINT32_MAX);
    }
    vocab_[token] = v;
    vocab_r_[v] = token;
  }
}

void Model::set_decode_vocab(const Node& node) {
  auto encoding = std::move(vocab_);
  vocab_.clear();
  vocab_r_.clear();
  set_vocab(node);
  vocab_ = std::move(encoding);
}

int64_t Model::require_token(const Node& where, const std::string& token) const {
  auto id = token_to_id(token);
  if (!id) bad_input("{}: field \"{}\": token {} is not in the vocabulary", where.file().path.string(), where.path(),
                     nlohmann::json(token).dump());
  return *id;
}

namespace {

// Where a token such as unk_token is named, for an error at encode time (the JSON is gone by then).
struct TokenSite {
  explicit TokenSite(const Node& n) : file(n.file().path.string()), path(n.path()) {}
  int64_t id(const Model& model, const std::string& token) const {
    auto id = model.token_to_id(token);
    if (!id) bad_input("{}: field \"{}\": token {} is not in the vocabulary", file, path, nlohmann::json(token).dump());
    return *id;
  }
  std::string file, path;
};

size_t utf8_char_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

class Bpe : public Model {
 public:
  explicit Bpe(const Node& node) : unk_site_(node["unk_token"]) {
    set_vocab(node["vocab"]);
    if (node["dropout"].present() && node["dropout"].value().is_number() && node["dropout"].value().get<double>() != 0.0)
      node["dropout"].unsupported_value("BPE dropout (encoding would be random)");
    if (node["unk_token"].present()) unk_token_ = node["unk_token"].str();
    prefix_ = node["continuing_subword_prefix"].str_or("");
    suffix_ = node["end_of_word_suffix"].str_or("");
    fuse_unk_ = node["fuse_unk"].boolean_or(false);
    byte_fallback_ = node["byte_fallback"].boolean_or(false);
    ignore_merges_ = node["ignore_merges"].boolean_or(false);
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        auto id = token_to_id(fmt::format("<0x{:02X}>", b));
        byte_ids_[b] = id ? *id : -1;
      }
    }

    Node merges = node["merges"];
    if (!merges.present()) merges.wrong("a list of merges");
    const auto& list = merges.array();
    merges_.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      Node m = merges[i];
      std::string a, b;
      if (m.value().is_string()) {
        // "a b": split on the first space (tokenizers splits on ' ' and wants exactly two parts).
        std::string s = m.value().get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          m.wrong("a merge \"a b\" of two tokens separated by one space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.value().is_array() && m.value().size() == 2 && m.value()[0].is_string() && m.value()[1].is_string()) {
        a = m.value()[0].get<std::string>();
        b = m.value()[1].get<std::string>();
      } else {
        m.wrong("a merge \"a b\" or [\"a\", \"b\"]");
      }
      int64_t ia = require_token(m, a), ib = require_token(m, b);
      if (b.size() < prefix_.size()) m.wrong("a second token starting with continuing_subword_prefix");
      int64_t merged = require_token(m, a + b.substr(prefix_.size()));
      merges_[key(ia, ib)] = {int64_t(i), merged};
    }
  }

  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    if (w.empty()) return;
    if (ignore_merges_) {
      if (auto id = token_to_id(w)) {
        out.push_back(*id);
        return;
      }
    }
    std::vector<Symbol> symbols;
    symbols.reserve(w.size());
    int64_t unk_id = -1;  // a pending unknown token (-1: none) and its byte length
    size_t unk_len = 0;
    auto add = [&](int64_t id, size_t len) {
      int64_t idx = int64_t(symbols.size());
      symbols.push_back(Symbol{id, idx - 1, idx + 1, len});
    };
    std::string s;
    for (size_t i = 0; i < w.size();) {
      size_t len = std::min(utf8_char_len(uint8_t(w[i])), w.size() - i);
      bool first = i == 0, last = i + len == w.size();
      s.assign(w, i, len);
      if (!first && !prefix_.empty()) s.insert(0, prefix_);
      if (last && !suffix_.empty()) s += suffix_;
      i += len;
      if (auto id = token_to_id(s)) {
        if (unk_id >= 0) {
          add(unk_id, unk_len);
          unk_id = -1;
        }
        add(*id, len);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char b : s) all = all && byte_ids_[b] >= 0;
        if (all) {
          for (unsigned char b : s) add(byte_ids_[b], 1);
          continue;
        }
      }
      if (unk_token_) {
        if (unk_id >= 0 && fuse_unk_) {
          unk_len += len;
        } else {
          if (unk_id >= 0) add(unk_id, unk_len);
          unk_id = unk_site_.id(*this, *unk_token_);
          unk_len = len;
        }
      }
    }
    if (unk_id >= 0) add(unk_id, unk_len);
    if (!symbols.empty()) symbols.back().next = -1;
    merge_all(symbols);
    for (const auto& sym : symbols)
      if (sym.len) out.push_back(sym.id);
  }

 private:
  struct Symbol {
    int64_t id, prev, next;
    size_t len;  // 0 once merged into its left neighbour
  };
  struct Merge {
    size_t pos;
    int64_t rank, new_id;
    // std::priority_queue pops the largest: make that the lowest rank, then the leftmost.
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  static uint64_t key(int64_t a, int64_t b) { return (uint64_t(a) << 32) | uint64_t(b); }

  const std::pair<int64_t, int64_t>* find_merge(int64_t a, int64_t b) const {
    auto it = merges_.find(key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  // Word::merge_all without dropout: always apply the lowest-ranked merge present, leftmost first.
  void merge_all(std::vector<Symbol>& sym) const {
    std::priority_queue<Merge> queue;
    for (size_t i = 0; i + 1 < sym.size(); ++i)
      if (auto m = find_merge(sym[i].id, sym[i + 1].id)) queue.push(Merge{i, m->first, m->second});
    while (!queue.empty()) {
      Merge top = queue.top();
      queue.pop();
      Symbol& cur = sym[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      size_t next_pos = size_t(cur.next);
      Symbol right = sym[next_pos];
      auto m = find_merge(cur.id, right.id);
      if (!m || m->second != top.new_id) continue;  // stale entry
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      sym[next_pos].len = 0;
      if (right.next > -1 && size_t(right.next) < sym.size()) sym[size_t(right.next)].prev = int64_t(top.pos);
      if (cur.prev >= 0) {
        if (auto pm = find_merge(sym[size_t(cur.prev)].id, cur.id))
          queue.push(Merge{size_t(cur.prev), pm->first, pm->second});
      }
      if (cur.next >= 0 && size_t(cur.next) < sym.size()) {
        if (auto nm = find_merge(cur.id, sym[size_t(cur.next)].id)) queue.push(Merge{top.pos, nm->first, nm->second});
      }
    }
  }

  TokenSite unk_site_;
  std::optional<std::string> unk_token_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  int64_t byte_ids_[256];
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;  // (a, b) -> (rank, merged id)
};

class WordPiece : public Model {
 public:
  explicit WordPiece(const Node& node) : unk_site_(node["unk_token"]) {
    set_vocab(node["vocab"]);
    unk_token_ = node["unk_token"].str_or("[UNK]");
    prefix_ = node["continuing_subword_prefix"].str_or("##");
    max_chars_ = size_t(node["max_input_chars_per_word"].integer_opt(0).value_or(100));
    for (const auto& [token, id] : vocab_) longest_ = std::max(longest_, token.size());
  }

  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    size_t chars = 0;
    for (unsigned char c : w) chars += (c & 0xC0) != 0x80;
    if (chars > max_chars_) {
      out.push_back(unk_id());
      return;
    }
    size_t mark = out.size();
    std::string sub;
    for (size_t start = 0; start < w.size();) {
      // Greedy longest match, from the longest candidate that can be a token: no vocabulary entry is
      // longer than longest_ bytes, so this skips only candidates that cannot match (the result is
      // tokenizers' own) and the work per position is bounded by the vocabulary, not the word (a long
      // word under a large max_input_chars_per_word was cubic in its length).
      size_t end = w.size() - start > longest_ ? start + longest_ : w.size();
      while (end > start && end < w.size() && (uint8_t(w[end]) & 0xC0) == 0x80) --end;  // a whole character
      std::optional<int64_t> found;
      while (start < end) {
        sub.clear();
        if (start > 0) sub = prefix_;
        sub.append(w, start, end - start);
        if ((found = token_to_id(sub))) break;
        do --end;  // back off one whole character
        while (end > start && (uint8_t(w[end]) & 0xC0) == 0x80);
      }
      if (!found) {
        out.resize(mark);
        out.push_back(unk_id());
        return;
      }
      out.push_back(*found);
      start = end;
    }
  }

 private:
  int64_t unk_id() const { return unk_site_.id(*this, unk_token_); }
  TokenSite unk_site_;
  std::string unk_token_, prefix_;
  size_t max_chars_;
  size_t longest_ = 0;  // bytes of the longest vocabulary entry (continuing ones with their prefix)
};

class WordLevel : public Model {
 public:
  explicit WordLevel(const Node& node) : unk_site_(node["unk_token"]) {
    set_vocab(node["vocab"]);
    unk_token_ = node["unk_token"].str_or("<unk>");
  }
  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    if (auto id = token_to_id(w))
      out.push_back(*id);
    else
      out.push_back(unk_site_.id(*this, unk_token_));
  }

 private:
  TokenSite unk_site_;
  std::string unk_token_;
};

// SentencePiece's unigram model: the segmentation of the highest total score (the Viterbi path of
// Unigram::encode_optimized), characters in no token becoming unk_id (scored min - 10), runs of them
// fused into one piece, which is then looked up whole, else spelt in <0xNN> byte tokens (byte_fallback)
// or given unk_id.
class Unigram : public Model {
 public:
  explicit Unigram(const Node& node) : file_(node.file().path.string()) {
    Node list = node["vocab"];
    size_t n = list.array().size();
    scores_.reserve(n);
    vocab_.reserve(n);
    vocab_r_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      Node entry = list[i];
      const json& v = entry.value();
      if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number())
        entry.wrong("a pair [\"token\", score]");
      std::string token = v[0].get<std::string>();
      vocab_[token] = int64_t(i);  // a repeated token: the last id wins, as in tokenizers' map
      vocab_r_[int64_t(i)] = token;
      scores_.push_back(v[1].get<double>());
    }
    if (node["unk_id"].present()) {
      unk_id_ = node["unk_id"].integer(0, INT64_MAX);
      if (*unk_id_ >= int64_t(n)) node["unk_id"].wrong(fmt::format("an id below the vocabulary size {}", n));
    }
    byte_fallback_ = node["byte_fallback"].boolean_or(false);
    for (double s : scores_) min_score_ = std::min(min_score_, s);
    // The tokens sorted bytewise (one id per token, the one vocab_ holds) for the prefix search.
    sorted_.reserve(vocab_.size());
    for (const auto& [token, id] : vocab_)
      if (!token.empty()) sorted_.push_back(&token);
    std::sort(sorted_.begin(), sorted_.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  }

  int64_t vocab_size() const override { return int64_t(scores_.size()); }

  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    if (w.empty()) return;
    struct Best {
      double score = 0;
      int64_t id = 0;
      size_t start = SIZE_MAX;  // SIZE_MAX: no path reaches here yet
    };
    std::vector<Best> best(w.size() + 1);
    const double unk_score = min_score_ - 10.0;  // K_UNK_PENALTY
    auto offer = [&](size_t start, size_t end, double score, int64_t id) {
      Best& t = best[end];
      double candidate = score + best[start].score;
      if (t.start == SIZE_MAX || candidate > t.score) t = Best{candidate, id, start};
    };
    for (size_t start = 0; start < w.size();) {
      size_t mblen = std::min(utf8_char_len(uint8_t(w[start])), w.size() - start);
      bool single = false;  // a token covers exactly this character
      // Every token that prefixes w[start..]: narrow the sorted range one byte at a time.
      size_t lo = 0, hi = sorted_.size();
      for (size_t d = 0; start + d < w.size() && lo < hi; ++d) {
        unsigned char c = uint8_t(w[start + d]);
        auto byte_at = [d](const std::string* t) { return uint8_t((*t)[d]); };
        // [lo, hi) share the first d bytes; the token of exactly d bytes, if any, is first.
        if (sorted_[lo]->size() == d) ++lo;
        lo = size_t(std::partition_point(sorted_.begin() + lo, sorted_.begin() + hi,
                                         [&](const std::string* t) { return byte_at(t) < c; }) - sorted_.begin());
        hi = size_t(std::partition_point(sorted_.begin() + lo, sorted_.begin() + hi,
                                         [&](const std::string* t) { return byte_at(t) <= c; }) - sorted_.begin());
        if (lo < hi && sorted_[lo]->size() == d + 1) {
          int64_t id = vocab_.find(*sorted_[lo])->second;
          offer(start, start + d + 1, scores_[size_t(id)], id);
          single = single || d + 1 == mblen;
        }
      }
      if (!single) {
        Best& t = best[start + mblen];
        if (t.start == SIZE_MAX || unk_score + best[start].score > t.score) {
          if (!unk_id_)
            bad_input("{}: field \"model.unk_id\": the text has a character that is in no token and the model has no "
                      "unk_id", file_);
          offer(start, start + mblen, unk_score, *unk_id_);
        }
      }
      start += mblen;
    }
    // Back from the end; adjacent unknown pieces fuse (fuse_unk is always on for Unigram).
    std::vector<std::pair<size_t, size_t>> pieces;  // [start, end), in reverse
    bool prev_unk = false;
    for (size_t end = w.size(); end > 0;) {
      const Best& node = best[end];
      bool unk = unk_id_ && node.id == *unk_id_;  // a token with the unk id fuses too, as in tokenizers
      if (unk && prev_unk)
        pieces.back().first = node.start;
      else
        pieces.emplace_back(node.start, end);
      prev_unk = unk;
      end = node.start;
    }
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      std::string_view piece(w.data() + it->first, it->second - it->first);
      if (auto id = token_to_id(piece)) {
        out.push_back(*id);
        continue;
      }
      if (byte_fallback_) {
        size_t mark = out.size();
        bool all = true;
        for (unsigned char b : piece) {
          auto id = token_to_id(fmt::format("<0x{:02X}>", b));
          if (!id) {
            all = false;
            break;
          }
          out.push_back(*id);
        }
        if (all) continue;
        out.resize(mark);
      }
      if (!unk_id_)
        bad_input("{}: field \"model.unk_id\": the text has a piece that is in no token and the model has no unk_id",
                  file_);
      out.push_back(*unk_id_);
    }
  }

 private:
  std::string file_;
  std::vector<double> scores_;
  std::vector<const std::string*> sorted_;  // keys of vocab_, bytewise
  std::optional<int64_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = std::numeric_limits<double>::infinity();
};

}  // namespace

// hfx's own model type, for a tokenizer that numbers a SentencePiece model's pieces by a vocab.json
// (Marian: sentencepiece_model.h's marian_tokenizer_json): the Unigram in "pieces" splits the text, and
// each piece takes its id from "vocab", or unk_token's when vocab.json lacks it (as MarianTokenizer's
// convert_tokens_to_ids does). A "target_vocab" (Marian's separate_vocabs) numbers the ids decode reads:
// the decoder's outputs are in the target vocabulary.
class PieceVocab : public Model {
 public:
  explicit PieceVocab(const Node& node) : pieces_(std::make_unique<Unigram>(node["pieces"])) {
    set_vocab(node["vocab"]);
    if (node["target_vocab"].present()) set_decode_vocab(node["target_vocab"]);
    unk_ = require_token(node["unk_token"], node["unk_token"].str());
  }
  void tokenize(const std::string& piece, std::vector<int64_t>& out) const override {
    std::vector<int64_t> ids;
    pieces_->tokenize(piece, ids);
    for (int64_t id : ids) {
      const std::string* text = pieces_->id_to_token(id);
      const auto it = text ? vocab_.find(*text) : vocab_.end();
      out.push_back(it == vocab_.end() ? unk_ : it->second);
    }
  }

 private:
  std::unique_ptr<Unigram> pieces_;
  int64_t unk_ = 0;
};

std::unique_ptr<Model> make_model(const Node& node) {
  if (!node.present()) node.wrong("a model object");
  // Older files leave out "type"; the fields tell BPE (merges) from WordPiece.
  std::string type;
  if (node["type"].present())
    type = node.type();
  else if (node["merges"].present())
    type = "BPE";
  else if (node["continuing_subword_prefix"].present() || node["max_input_chars_per_word"].present())
    type = "WordPiece";
  else
    node["type"].wrong("a model type (BPE, WordPiece, WordLevel)");
  if (type == "BPE") return std::make_unique<Bpe>(node);
  if (type == "WordPiece") return std::make_unique<WordPiece>(node);
  if (type == "WordLevel") return std::make_unique<WordLevel>(node);
  if (type == "Unigram") return std::make_unique<Unigram>(node);
  if (type == "PieceVocab") return std::make_unique<PieceVocab>(node);
  node["type"].unsupported_value("model");
}

}  // namespace hfx::tokenizer
