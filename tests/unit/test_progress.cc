// Progress on a terminal (a line redrawn with carriage returns) and in a log (plain lines, F#26).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/progress.h"

namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += char(c);
  return text;
}

hfx::ProgressOutput to(std::FILE* f, bool terminal, double seconds) { return {f, terminal, seconds}; }

TEST(Progress, LogGetsPlainLinesWithoutCarriageReturns) {
  std::FILE* f = std::tmpfile();
  {
    hfx::Progress p("onnx decoder", 3, 300, to(f, false, 0));
    for (int i = 0; i < 3; ++i) p.advance(1, 100);
    p.finish();
  }
  const std::string text = contents(f);
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_NE(text.find("onnx decoder: 1/3 tensors, 100 B/300 B"), std::string::npos) << text;
  EXPECT_NE(text.find("onnx decoder: 3/3 tensors, 300 B/300 B"), std::string::npos) << text;
  EXPECT_NE(text.find("(done)\n"), std::string::npos) << text;
  std::fclose(f);
}

TEST(Progress, QuickWorkPrintsNothingToALog) {
  std::FILE* f = std::tmpfile();
  {
    auto p = hfx::Progress::steps("verify", 4, "shape cases", to(f, false, 3600));
    for (int i = 0; i < 4; ++i) p.advance(1, 0);
    p.finish();
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(Progress, TerminalRedrawsOneLine) {
  std::FILE* f = std::tmpfile();
  {
    auto p = hfx::Progress::steps("verify", 2, "tokens", to(f, true, 10));
    p.advance(1, 0);
    p.finish();
  }
  const std::string text = contents(f);
  EXPECT_EQ(text.front(), '\r') << text;
  EXPECT_NE(text.find("verify: 1/2 tokens"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  std::fclose(f);
}

}  // namespace
