// tokenizer.json: tokenizer::Tokenizer::load on the input, then encode fixed texts and the input's first
// bytes (with and without special tokens), decode what came out and a spread of ids, and look up
// tokens. Ids from encode must lie in [0, vocab_size) or be added tokens.
#include <algorithm>

#include "harness.h"
#include "tokenizer/tokenizer.h"

using namespace hfx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "tokenizer.json";
  fuzz::write_file(path, data, size);
  fuzz::expect_user_errors([&] {
    tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(path);
    const int64_t vocab = tok.vocab_size();
    HFX_FUZZ_ASSERT(vocab >= 0, "negative vocab size");
    std::vector<std::string> texts = {
        "", " ", "Hello world!", "  leading and trailing  ", "a\nb\tc\r\n", "ÀÉÎõü ñ ß",
        "日本語のテキスト", "emoji \xF0\x9F\x98\x80 and \xE2\x80\x8B zero-width", "<s></s><unk><pad>[CLS]",
        "1234567890 3.14", "don't we'll I'M", std::string(300, 'a'),
        std::string(reinterpret_cast<const char*>(data), std::min<size_t>(size, 64))};
    for (const auto& text : texts) {
      for (bool special : {true, false}) {
        std::vector<int64_t> ids;
        try {
          ids = tok.encode(text, special);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::BadInput) throw;  // invalid UTF-8 in the last text
          continue;
        }
        for (int64_t id : ids) HFX_FUZZ_ASSERT(id >= 0, "negative id from encode");
        (void)tok.decode(ids, true);
        (void)tok.decode(ids, false);
      }
    }
    std::vector<int64_t> ids;
    for (int64_t i = -2; i < std::min<int64_t>(vocab + 2, 300); ++i) ids.push_back(i);
    ids.push_back(INT64_MAX);
    ids.push_back(INT64_MIN);
    (void)tok.decode(ids, true);
    (void)tok.decode(ids, false);
    for (int64_t id : ids)
      if (auto t = tok.id_to_token(id)) (void)tok.token_to_id(*t);
  });
  return 0;
}
