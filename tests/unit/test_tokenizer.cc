// tokenizer.json: loading errors, hand-checked encodings of tiny tokenizers, the Unicode helpers and
// the known-regex matcher. The parity with `tokenizers` itself is tests/oracle/test_tokenizer.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/stages.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_tables.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace hfx;
using namespace hfx::tokenizer;

namespace {

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hfx_tok_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const json& j, const std::string& name = "tokenizer.json") {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << j.dump();
    return p;
  }
  Tokenizer load(const json& j) { return Tokenizer::load(write(j)); }

  // Loading `j` fails with `kind`, in one line naming every string of `expected`.
  void expect_error(const json& j, ErrorKind kind, std::initializer_list<std::string> expected) {
    fs::path p = write(j);
    try {
      Tokenizer::load(p);
      FAIL() << "loading should have failed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.describe();
      EXPECT_EQ(e.describe().find('\n'), std::string::npos);
      for (const auto& s : expected) EXPECT_NE(e.describe().find(s), std::string::npos) << s << " not in " << e.describe();
    }
  }

  fs::path dir_;
};

json tiny_bpe() {
  return {{"model",
           {{"type", "BPE"},
            {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}, {"<unk>", 5}}},
            {"merges", {"a b", "ab c"}},
            {"unk_token", "<unk>"}}},
          {"pre_tokenizer", {{"type", "WhitespaceSplit"}}}};
}

json tiny_wordpiece() {
  return {{"normalizer", {{"type", "BertNormalizer"}, {"lowercase", true}, {"strip_accents", nullptr}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", "[UNK]"},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 10},
            {"vocab", {{"[UNK]", 0}, {"un", 1}, {"##aff", 2}, {"##able", 3}, {"[CLS]", 4}, {"[SEP]", 5}, {"!", 6}, {"e", 7}}}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                    {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}})},
            {"special_tokens",
             {{"[CLS]", {{"id", "[CLS]"}, {"ids", {4}}, {"tokens", {"[CLS]"}}}},
              {"[SEP]", {{"id", "[SEP]"}, {"ids", {5}}, {"tokens", {"[SEP]"}}}}}}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"added_tokens", json::array({{{"id", 4}, {"content", "[CLS]"}, {"special", true}, {"normalized", false}},
                                        {{"id", 5}, {"content", "[SEP]"}, {"special", true}, {"normalized", false}}})}};
}

TEST_F(TokenizerTest, BpeMergesInBothSpellingsAndUnknowns) {
  auto tok = load(tiny_bpe());
  EXPECT_EQ(tok.encode("abc ab ca"), (std::vector<int64_t>{4, 3, 2, 0}));
  EXPECT_EQ(tok.encode("axxb"), (std::vector<int64_t>{0, 5, 5, 1}));  // one <unk> per character
  EXPECT_EQ(tok.encode(""), std::vector<int64_t>{});
  EXPECT_EQ(tok.vocab_size(), 6);
  EXPECT_EQ(tok.token_to_id("abc"), 4);
  EXPECT_EQ(tok.token_to_id("zz"), std::nullopt);
  EXPECT_EQ(tok.decode({4, 3, 99}), "abc ab");  // no decoder: tokens joined by spaces, unknown ids skipped

  json j = tiny_bpe();
  j["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"ab", "c"})});  // the newer spelling
  EXPECT_EQ(load(j).encode("abc ab ca"), (std::vector<int64_t>{4, 3, 2, 0}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(load(j).encode("axxb"), (std::vector<int64_t>{0, 5, 1}));
}

TEST_F(TokenizerTest, ByteFallbackRoundTrip) {
  json j = tiny_bpe();
  j["model"]["byte_fallback"] = true;
  j["model"]["vocab"]["<0xC3>"] = 6;
  j["model"]["vocab"]["<0xA9>"] = 7;
  j["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
  auto tok = load(j);
  EXPECT_EQ(tok.encode("a\xC3\xA9"), (std::vector<int64_t>{0, 6, 7}));  // "aé"
  EXPECT_EQ(tok.encode("a\xC3\xA8"), (std::vector<int64_t>{0, 5}));     // "è": no <0xA8>, so <unk>
  EXPECT_EQ(tok.decode({0, 6, 7}), "a\xC3\xA9");
  EXPECT_EQ(tok.decode({6, 0}), "\xEF\xBF\xBD" "a");  // a lone lead byte decodes to U+FFFD
}

TEST_F(TokenizerTest, WordPieceWithTemplateAndDecoder) {
  auto tok = load(tiny_wordpiece());
  EXPECT_EQ(tok.encode("UnAffable!"), (std::vector<int64_t>{4, 1, 2, 3, 6, 5}));
  EXPECT_EQ(tok.encode("UnAffable!", false), (std::vector<int64_t>{1, 2, 3, 6}));
  EXPECT_EQ(tok.encode("unaffablex"), (std::vector<int64_t>{4, 0, 5}));    // no piece for "x": the whole word is [UNK]
  EXPECT_EQ(tok.encode("unaffableun"), (std::vector<int64_t>{4, 0, 5}));   // longer than 10 characters
  EXPECT_EQ(tok.encode("\xC3\x89"), (std::vector<int64_t>{4, 7, 5}));      // "É": lowercased, accent stripped
  EXPECT_EQ(tok.encode("[CLS]un"), (std::vector<int64_t>{4, 4, 1, 5}));    // special tokens are split out first
  EXPECT_EQ(tok.decode({4, 1, 2, 3, 6, 5}), "unaffable!");
  EXPECT_EQ(tok.decode({4, 1, 5}, false), "[CLS] un [SEP]");
}

TEST_F(TokenizerTest, AddedTokenFlags) {
  json j = tiny_bpe();
  j["added_tokens"] = json::array({{{"id", 6}, {"content", "<x>"}, {"special", true}, {"lstrip", true}},
                                   {{"id", 7}, {"content", "<y>"}, {"single_word", true}, {"normalized", false}}});
  auto tok = load(j);
  EXPECT_EQ(tok.encode("ab  <x>c"), (std::vector<int64_t>{3, 6, 2}));  // lstrip swallows the spaces
  EXPECT_EQ(tok.encode("a <y> b"), (std::vector<int64_t>{0, 7, 1}));
  EXPECT_EQ(tok.encode("a<y>"), (std::vector<int64_t>{0, 5, 5, 5}));   // not a single word: left as text
  EXPECT_EQ(tok.vocab_size(), 8);
  EXPECT_EQ(tok.decode({3, 6, 7}), "ab <y>");  // special <x> skipped
}

TEST_F(TokenizerTest, LoadErrorsNameFileAndField) {
  EXPECT_THROW(Tokenizer::load(dir_ / "missing.json"), Error);
  try {
    Tokenizer::load(dir_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(e.describe().find("tokenizer.json"), std::string::npos);
  }

  expect_error(json::object(), ErrorKind::BadInput, {"tokenizer.json", "\"model\"", "missing"});
  json j = tiny_bpe();
  j["model"]["merges"][0] = "a z";
  expect_error(j, ErrorKind::BadInput, {"model.merges[0]", "\"z\"", "not in the vocabulary"});
  j = tiny_bpe();
  j["model"]["merges"][1] = 7;
  expect_error(j, ErrorKind::BadInput, {"model.merges[1]", "found 7"});
  j = tiny_bpe();
  j["normalizer"] = {{"type", "Nmt"}};
  expect_error(j, ErrorKind::Unsupported, {"normalizer.type", "Nmt"});
  j["normalizer"] = {{"type", "Precompiled"}};
  expect_error(j, ErrorKind::BadInput, {"normalizer.precompiled_charsmap", "missing"});
  j = tiny_bpe();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}};
  expect_error(j, ErrorKind::Unsupported, {"pre_tokenizer.pattern.Regex", "\\\\w+"});
  j = tiny_bpe();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  expect_error(j, ErrorKind::BadInput, {"pre_tokenizer.behavior", "Sideways"});
  j = tiny_bpe();
  j["model"]["dropout"] = 0.1;
  expect_error(j, ErrorKind::Unsupported, {"model.dropout"});
  j = tiny_wordpiece();
  j["post_processor"]["single"][0]["SpecialToken"]["id"] = "[BOS]";
  expect_error(j, ErrorKind::BadInput, {"post_processor.single[0].SpecialToken.id", "[BOS]"});
}

TEST_F(TokenizerTest, InvalidUtf8TextIsBadInput) {
  auto tok = load(tiny_bpe());
  try {
    tok.encode("ab\xFF");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(e.describe().find("offset 2"), std::string::npos) << e.describe();
  }
}

// tokenizer.json resource bombs (hostile-input report D9): every allocation and all work stay bounded by
// the text and the file, and what exceeds the bounds is one BadInput line naming the file or field.
TEST_F(TokenizerTest, NormalizerGrowthIsBounded) {
  json j = tiny_bpe();
  json steps = json::array();
  for (int i = 0; i < 64; ++i)  // each step doubles the a's: 2^64 x the input unbounded
    steps.push_back({{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aa"}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", steps}};
  auto tok = load(j);
  try {
    tok.encode("abc");
    FAIL() << "the growth should be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_EQ(e.describe().find('\n'), std::string::npos);
    EXPECT_NE(e.describe().find("tokenizer.json"), std::string::npos) << e.describe();
    EXPECT_NE(e.describe().find("64 x the input + 4096"), std::string::npos) << e.describe();
  }
  // One Replace with a long content on a long text is refused inside the step, before its output.
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(1000, 'b')}};
  EXPECT_THROW(load(j).encode(std::string(100000, 'a')), Error);
  // Growth a real normalizer makes (a few times the text) passes, and a tokenizer is usable after a refusal.
  steps = json::array();
  for (int i = 0; i < 5; ++i) steps.push_back({{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aa"}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", steps}};
  EXPECT_EQ(load(j).encode(std::string(1000, 'a')), std::vector<int64_t>(32000, 0));  // 32x: allowed
}

TEST_F(TokenizerTest, PaddingLengthsAreBounded) {
  json j = tiny_bpe();
  j["padding"] = {{"strategy", {{"Fixed", int64_t(1) << 29}}}, {"pad_id", 5}};
  expect_error(j, ErrorKind::BadInput, {"padding.strategy.Fixed", "1048576"});
  j["padding"] = {{"strategy", "BatchLongest"}, {"pad_to_multiple_of", int64_t(1) << 62}};
  expect_error(j, ErrorKind::BadInput, {"padding.pad_to_multiple_of", "1048576"});
  j["padding"] = {{"strategy", {{"Fixed", 4}}}, {"pad_id", 5}, {"pad_to_multiple_of", 3}};
  EXPECT_EQ(load(j).encode("ab"), (std::vector<int64_t>{3, 5, 5, 5, 5, 5}));  // 4 rounded up to 6
}

TEST_F(TokenizerTest, WordPieceLongWordIsLinear) {
  // max_input_chars_per_word far above the word: the greedy longest match tries candidates no longer
  // than the longest vocabulary entry, so a 200 000-character word takes linear work (it was cubic).
  json j = tiny_wordpiece();
  j["model"]["max_input_chars_per_word"] = 1000000000;
  j["model"]["vocab"]["##e"] = 8;
  auto tok = load(j);
  std::vector<int64_t> ids = tok.encode("e" + std::string(200000, 'e'), false);
  ASSERT_EQ(ids.size(), 200001u);
  EXPECT_EQ(ids[0], 7);
  EXPECT_EQ(ids[1], 8);
  // The first candidate ends at the longest entry's length (6 bytes), backed off to a whole
  // character when that falls inside one: the same tokens as trying every length.
  EXPECT_EQ(tok.encode("unaffable", false), (std::vector<int64_t>{1, 2, 3}));
  j["model"]["vocab"]["u"] = 11;
  j["model"]["vocab"]["##\xD0\xB6\xD0\xB6"] = 9;  // "##жж", 6 bytes
  j["model"]["vocab"]["##\xD0\xB6"] = 10;           // "##ж"
  tok = load(j);
  EXPECT_EQ(tok.encode("u\xD0\xB6\xD0\xB6\xD0\xB6", false), (std::vector<int64_t>{11, 9, 10}));  // "uжжж"
  EXPECT_EQ(tok.encode("u\xD0\xB6\xD0\xB6\xD0\xB6x", false), (std::vector<int64_t>{0}));  // no "##x": [UNK]
}

// The Rust doc example of Unigram::encode: "abcdacdxx" -> abcd a cd xx, the unknown x's fused.
json tiny_unigram() {
  json vocab = json::array();
  for (auto [t, s] : std::initializer_list<std::pair<const char*, double>>{
           {"<unk>", 0}, {"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"cd", 1}, {"ab", 2}, {"abc", 5}, {"abcd", 10}})
    vocab.push_back(json::array({t, s}));
  return {{"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}}}};
}

TEST_F(TokenizerTest, UnigramBestPathAndFusedUnknowns) {
  Tokenizer t = load(tiny_unigram());
  EXPECT_EQ(t.encode("abcdacdxx"), (std::vector<int64_t>{8, 1, 5, 0}));
  EXPECT_EQ(t.encode("xxéab"), (std::vector<int64_t>{0, 6}));  // x x é fuse into one unk
  EXPECT_EQ(t.encode(""), std::vector<int64_t>{});
  EXPECT_EQ(t.vocab_size(), 9);
  EXPECT_EQ(t.decode({8, 1, 5}), "abcd a cd");

  // byte_fallback: an unknown piece is spelt in <0xNN> tokens when all its bytes have one.
  json j = tiny_unigram();
  j["model"]["byte_fallback"] = true;
  j["model"]["vocab"].push_back(json::array({"<0x78>", -1.0}));
  t = load(j);
  EXPECT_EQ(t.encode("axxd"), (std::vector<int64_t>{1, 9, 9, 4}));
  EXPECT_EQ(t.encode("ayd"), (std::vector<int64_t>{1, 0, 4}));  // no <0x79>: unk

  // Without unk_id an unknown character is an error naming the field; known text still encodes.
  j = tiny_unigram();
  j["model"].erase("unk_id");
  t = load(j);
  EXPECT_EQ(t.encode("abcd"), (std::vector<int64_t>{8}));
  try {
    t.encode("abxd");
    FAIL() << "encoding an unknown character without unk_id should fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(e.describe().find("model.unk_id"), std::string::npos) << e.describe();
  }
}

TEST_F(TokenizerTest, UnigramLoadErrors) {
  json j = tiny_unigram();
  j["model"]["unk_id"] = 9;
  expect_error(j, ErrorKind::BadInput, {"tokenizer.json", "model.unk_id"});
  j = tiny_unigram();
  j["model"]["vocab"][3] = json::array({"c"});
  expect_error(j, ErrorKind::BadInput, {"model.vocab[3]"});
  j = tiny_unigram();
  j["model"]["vocab"][2] = json::array({"b", "high"});
  expect_error(j, ErrorKind::BadInput, {"model.vocab[2]"});
}

// A charsmap built by sentencepiece from the rules a -> A, x -> X, "x U+0301" -> Y, U+FB01 -> fi.
const char* kRulesCharsmap =
    "AAQAAACAAQBhDQAAAAAAgAIAAICBBQAABAAAgKwAAgCBPQAABgAAgAgAAAALAAAACgAAAA0AAAAMAAAADwAAAA4AAAARAAAAEAAA"
    "ABMAAAASAAAAFQAAABQAAAAXAAAAFgAAAHhtAAAYAAAAGwAAABoAAAAdAAAAHAAAAB8AAAAeAAAAIQAAACAAAAAjAAAAIgAAACUA"
    "AAAkAAAAJwAAACYAAAApAAAAKAAAACsAAAAqAAAALQAAACwAAAAvAAAALgAAADEAAAAwAAAAMwAAADIAAAA1AAAANAAAADcAAAA2"
    "AAAAOQAAADgAAAA7AAAAOgAAAD0AAAA8AAAAPwAAAD4AAABBAAAAQAAAAEMAAABCAAAARQAAAEQAAABHAAAARgAAAEkAAABIAAAA"
    "SwAAAEoAAABNAAAATAAAAE8AAABOAAAAUQAAAFAAAABTAAAAUgAAAFUAAABUAAAAVwAAAFYAAABZAAAAWAAAAFsAAABaAAAAXQAA"
    "AFwAAABfAAAAXgAAAGEAAABgAAAAYwAAAGIAAABlAAAAZAAAAGcAAABmAAAAaQAAAGgAAABrAAAAagAAAG0AAABsAAAAbwAAAG4A"
    "AABxAAAAcAAAAHMAAAByAAAAdQAAAHQAAAB3AAAAdgAAAHkAAAB4AAAAewAAAHoAAAB9AAAAfAAAAH8AAAB+AAAAgQAAAIAAAACD"
    "AAAAggAAAIUAAACEAAAAhwAAAIYAAACJAAAAiAAAAIsAAACKAAAAjQAAAIwAAACPAAAA75QAAJEAAACQAAAAkwAAAJIAAACVAAAA"
    "lAAAAJcAAACWAAAAmQAAAJgAAACbAAAAmgAAAJ0AAACcAAAAnwAAAJ4AAAChAAAAoAAAAKMAAACiAAAApQAAAKQAAACnAAAApgAA"
    "AKkAAACoAAAAqwAAAKoAAACtAAAArAAAAK8AAACuAAAAsQAAALAAAACzAAAAsgAAALUAAAC0AAAAtwAAALYAAAC5AAAAuAAAALsA"
    "AAC6AAAAvQAAALwAAAC/AAAAvgAAAMEAAADAAAAAwwAAAMIAAADFAAAAxAAAAMcAAADGAAAAyQAAAMgAAADLAAAAygAAAM0AAADM"
    "AAAAzwAAAMwoAQDRAAAA0AAAANMAAADSAAAA1QAAANQAAADXAAAA1gAAANkAAADYAAAA2wAAANoAAADdAAAA3AAAAN8AAADeAAAA"
    "4QAAAOAAAADjAAAA4gAAAOUAAADkAAAA5wAAAOYAAADpAAAA6AAAAOsAAADqAAAA7QAAAOwAAADvAAAA7gAAAPEAAADwAAAA8wAA"
    "APIAAAD1AAAA9AAAAPcAAAD2AAAA+QAAAPgAAAD7AAAA+gAAAP0AAAD8AAAA/wAAAP4AAABBAFgAWQBmaQA=";

json precompiled(const std::string& charsmap) {
  json j = tiny_unigram();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", charsmap}};
  return j;
}

TEST_F(TokenizerTest, PrecompiledCharsmap) {
  Tokenizer t = load(precompiled(kRulesCharsmap));
  auto text = [&](const std::string& s) { return t.decode(t.encode(s)); };
  EXPECT_EQ(t.encode("ab"), t.encode("Ab"));  // a -> A, which is unknown: one unk, then b
  // A cluster under 6 bytes is looked up whole and the *shortest* key wins: "x U+0301" becomes X,
  // not Y, and the mark is gone (tokenizers' behaviour, kept on purpose).
  Tokenizer plain = load(tiny_unigram());
  EXPECT_EQ(t.encode("x\u0301"), plain.encode("X"));
  EXPECT_EQ(t.encode("\uFB01\u0301b"), plain.encode("fib"));
  EXPECT_EQ(text("cd"), "cd");

  // Hostile charsmaps: one clear error naming the field, never a crash.
  expect_error(precompiled("not base64!"), ErrorKind::BadInput, {"normalizer.precompiled_charsmap", "base64"});
  expect_error(precompiled("AAE="), ErrorKind::BadInput, {"normalizer.precompiled_charsmap"});
  expect_error(precompiled("/////wAAAAA="), ErrorKind::BadInput, {"normalizer.precompiled_charsmap", "trie"});
  expect_error(precompiled("AAAAAA=="), ErrorKind::BadInput, {"normalizer.precompiled_charsmap", "empty"});
  // A one-unit trie whose root points past the array: an error at encode time.
  t = load(precompiled("BAAAAAD8//8="));
  EXPECT_THROW(t.encode("a"), Error);
}

TEST_F(TokenizerTest, ReplaceRunsRegex) {
  json j = tiny_bpe();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", "c"}};
  j["pre_tokenizer"] = nullptr;
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a  b"), t.encode("acb"));
  EXPECT_EQ(t.encode("a     b"), t.encode("acb"));
  j["normalizer"]["pattern"]["Regex"] = " +";
  expect_error(j, ErrorKind::Unsupported, {"normalizer.pattern.Regex"});
}

TEST(Unicode, GraphemeClusters) {
  auto clusters = [](const std::u32string& s) {
    std::vector<std::u32string> out;
    for (size_t b = 0; b < s.size();) {
      size_t e = unicode::grapheme_end(s, b);
      out.push_back(s.substr(b, e - b));
      b = e;
    }
    return out;
  };
  using V = std::vector<std::u32string>;
  EXPECT_EQ(clusters(U"e\u0301x"), (V{U"e\u0301", U"x"}));
  EXPECT_EQ(clusters(U"\r\n\n"), (V{U"\r\n", U"\n"}));
  EXPECT_EQ(clusters(U"\u1100\u1161\u11A8\u1100"), (V{U"\u1100\u1161\u11A8", U"\u1100"}));
  EXPECT_EQ(clusters(U"\U0001F1EB\U0001F1F7\U0001F1E9"), (V{U"\U0001F1EB\U0001F1F7", U"\U0001F1E9"}));
  EXPECT_EQ(clusters(U"\U0001F468\u200D\U0001F469x"), (V{U"\U0001F468\u200D\U0001F469", U"x"}));
  EXPECT_EQ(clusters(U"a\u200D\U0001F469"), (V{U"a\u200D", U"\U0001F469"}));
  EXPECT_EQ(clusters(U"\u0915\u094D\u0937"), (V{U"\u0915\u094D\u0937"}));  // GB9c conjunct
  EXPECT_EQ(clusters(U"\u0600a"), (V{U"\u0600a"}));                          // Prepend
  EXPECT_EQ(clusters(U"\u0915\u093F"), (V{U"\u0915\u093F"}));               // SpacingMark
}

TEST(Unicode, NormalizationForms) {
  using unicode::Form;
  using unicode::normalize;
  EXPECT_EQ(normalize(U"e\u0301", Form::NFC), U"\u00e9");
  EXPECT_EQ(normalize(U"\u00c5", Form::NFD), U"A\u030a");
  EXPECT_EQ(normalize(U"\u212b", Form::NFC), U"\u00c5");                  // singleton decomposition
  EXPECT_EQ(normalize(U"q\u0307\u0323", Form::NFC), U"q\u0323\u0307");     // canonical reordering
  EXPECT_EQ(normalize(U"\u1112\u1161\u11ab", Form::NFC), U"\ud55c");      // Hangul LVT
  EXPECT_EQ(normalize(U"\ud55c", Form::NFD), U"\u1112\u1161\u11ab");
  EXPECT_EQ(normalize(U"\ufb01", Form::NFKC), U"fi");
  EXPECT_EQ(normalize(U"\ufb01", Form::NFC), U"\ufb01");
  EXPECT_EQ(normalize(U"x\u00b2", Form::NFKD), U"x2");
  EXPECT_EQ(unicode::lowercase(U"\u0130A\u03a3"), U"i\u0307a\u03c3");     // per character, no final sigma
}

TEST(Unicode, Properties) {
  using unicode::has;
  EXPECT_TRUE(has(U'a', unicode::kLetter));
  EXPECT_TRUE(has(U'\u6771', unicode::kLetter));
  EXPECT_TRUE(has(U'\u0663', unicode::kNumber));
  EXPECT_TRUE(has(U'\u3000', unicode::kWhiteSpace));
  EXPECT_FALSE(has(U'\u200b', unicode::kWhiteSpace));
  EXPECT_TRUE(has(U'\u0301', unicode::kBertMn));
  EXPECT_TRUE(has(U'!', unicode::kBertPunct));
  EXPECT_EQ(unicode::combining_class(U'\u0301'), 230);
  EXPECT_EQ(unicode::combining_class(U'a'), 0);
}

TEST(Unicode, Utf8) {
  EXPECT_EQ(unicode::utf8_lossy("a\xE6\x9D" "b"), "a\xEF\xBF\xBD" "b");           // one U+FFFD per maximal subpart
  EXPECT_EQ(unicode::utf8_lossy("\xF0\x9F\x98" "A"), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(unicode::utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");          // never-valid lead byte
  EXPECT_EQ(unicode::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(unicode::to_utf8(unicode::from_utf8("h\xC3\xA9\xF0\x9F\x98\x80")), "h\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_FALSE(unicode::is_valid_utf8("\xE6\x9D"));
}

TEST(KnownRegex, Llama3Pattern) {
  const char* pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const auto* re = find_known_regex(pattern);
  ASSERT_NE(re, nullptr);
  EXPECT_EQ(find_known_regex(R"(\p{L}+)"), nullptr);
  std::u32string s = U"I'LL pay 1234567 now!!\n\n  ok   ";
  std::vector<std::u32string> pieces;
  for (auto [b, e] : find_regex_matches(*re, s)) pieces.push_back(s.substr(b, e - b));
  std::vector<std::u32string> want = {U"I", U"'LL", U" pay", U" ", U"123", U"456", U"7", U" now", U"!!\n\n",
                                      U" ", U" ok", U"   "};
  EXPECT_EQ(pieces, want);
}

}  // namespace

// A Marian folder's source.spm, written by hand in protobuf's wire format: pieces (field 1: piece 1,
// score 2 as fixed32, type 3), trainer_spec (2: model_type 3, unk_id 40), no normalizer rules.
namespace {

std::string varint(uint64_t v) {
  std::string out;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    out.push_back(char(b | (v ? 0x80 : 0)));
  } while (v);
  return out;
}
std::string field(uint32_t number, const std::string& bytes) { return varint(number << 3 | 2) + varint(bytes.size()) + bytes; }
std::string piece(const std::string& text, float score, int type = 1) {
  std::string s = field(1, text) + varint(2 << 3 | 5);
  s.append(reinterpret_cast<const char*>(&score), 4);
  return s + varint(3 << 3) + varint(uint64_t(type));
}

}  // namespace

TEST_F(TokenizerTest, MarianFolderNumbersSentencePiecePiecesByItsVocab) {
  std::string spm = field(1, piece("<unk>", 0, 2)) + field(1, piece("</s>", 0, 3)) + field(1, piece("\u2581ab", -1)) +
                    field(1, piece("\u2581a", -2)) + field(1, piece("b", -2)) + field(1, piece("c", -3));
  spm += field(2, varint(3 << 3) + varint(1) + varint(40 << 3) + varint(0));  // unigram, unk_id 0
  std::ofstream(dir_ / "source.spm", std::ios::binary) << spm;
  // vocab.json has no "c": MarianTokenizer maps it to <unk>.
  write(json{{"</s>", 0}, {"<unk>", 1}, {"\u2581ab", 7}, {"\u2581a", 5}, {"b", 6}, {"<pad>", 9}}, "vocab.json");
  Tokenizer t = Tokenizer::load(dir_);
  // sentencepiece splits "ab c" into ▁ab, ▁ (no such piece: unk), c (not in vocab.json: unk); then </s>.
  EXPECT_EQ(t.encode("ab c"), (std::vector<int64_t>{7, 1, 1, 0}));
  EXPECT_EQ(t.decode({7, 5, 6, 0}), "ab ab");

  // A truncated or hostile file is one line naming it, never a read past its end.
  for (const std::string& bad : {spm.substr(0, spm.size() - 3), std::string("\x0a\xff\xff\xff\xff\x0f", 6), std::string("\x0b", 1)}) {
    std::ofstream(dir_ / "source.spm", std::ios::binary | std::ios::trunc) << bad;
    try {
      Tokenizer::load(dir_);
      ADD_FAILURE() << "loaded a malformed source.spm";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_NE(std::string(e.what()).find("source.spm: not a SentencePiece model"), std::string::npos) << e.what();
    }
  }
}
