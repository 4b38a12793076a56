// report.html's renderer (pipeline/report_html.h) and the verdict every report opens with
// (pipeline/report_verdict.h), on hand-made reports: strings from the user's files are escaped
// wherever they land (text, attributes, SVG labels), and the verdict line says PASS, or FAIL with
// the root cause and the next step.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "pipeline/report_files.h"
#include "pipeline/report_html.h"
#include "pipeline/report_verdict.h"

using namespace hfx::pipeline;

namespace {

CheckResult numbers_check(const std::string& name, double max_abs, double atol, nlohmann::ordered_json layers = nullptr) {
  CheckResult c{"numbers: " + name, max_abs <= atol, "max abs ...", "max abs <= gate", {}};
  c.measured = {{"max_abs", max_abs}, {"mean_abs", max_abs / 10}, {"mismatched", max_abs <= atol ? 0 : 7}, {"elements", 64},
                {"atol", atol}};
  if (!layers.is_null()) {
    c.measured["worst_output"] = "logits";
    c.measured["layers"] = layers;
  }
  return c;
}

VerifyReport passing_report() {
  VerifyReport r;
  r.dir = "out/llama";
  r.runtime = "reference";
  r.checks.push_back({"artifact checksums", true, "11 files match hfx.json", "sha256 equal", {}});
  r.checks.push_back(numbers_check("decoder / prompt (batch 2, seq 8, past 0)", 1e-5, 1e-4));
  return r;
}

}  // namespace

TEST(HtmlEscape, EveryMarkupCharacter) {
  EXPECT_EQ(html_escape("a<b>&\"c\"'d'"), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;");
  EXPECT_EQ(html_escape("plain text / 1.5e-05"), "plain text / 1.5e-05");
  EXPECT_EQ(html_escape("&amp;"), "&amp;amp;");  // escaped again, never taken as an entity
  EXPECT_EQ(html_escape(""), "");
}

TEST(HtmlNumber, RoundTripsAndSpellsNonFinite) {
  EXPECT_EQ(html_number(1e-05), "1e-05");
  EXPECT_EQ(std::stod(html_number(0.1 + 0.2)), 0.1 + 0.2);
  EXPECT_EQ(html_number(INFINITY), "inf");
  EXPECT_EQ(html_number(NAN), "nan");
}

TEST(ReportHtml, EscapesStringsFromFilesEverywhere) {
  VerifyReport r = passing_report();
  r.dir = "out/<script>alert(1)</script>";
  const std::string evil = "x\"><img src=y onerror=alert(1)>";
  r.checks.push_back(numbers_check("decoder / " + evil, 2, 1e-4, nlohmann::ordered_json::array({{{"max_abs", 3.0}, {"mean_abs", 1.0}}})));
  r.checks.back().measured["worst_output"] = "present.<0>.key";
  r.checks.push_back({"op placement", true, "", "every node", {{"Mat<Mul>", {{"CPU\"EP", 3}}}}});
  r.checks.push_back({"performance", true, "", "measured only", {{"runtime", "<ref>"}, {"load_s", 0.5}}});
  const std::string html = render_html(r);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("Mat<Mul>"), std::string::npos);
  EXPECT_EQ(html.find("CPU\"EP"), std::string::npos);
  EXPECT_EQ(html.find("present.<0>"), std::string::npos);
  EXPECT_EQ(html.find("<ref>"), std::string::npos);
  EXPECT_NE(html.find("out/&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("x&quot;&gt;&lt;img src=y onerror=alert(1)&gt;"), std::string::npos);  // in the table and the SVG label
  EXPECT_NE(html.find("Mat&lt;Mul&gt;"), std::string::npos);
  // Self-contained: no script, no link, nothing fetched.
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
}

TEST(ReportHtml, PassingVerdictLine) {
  const std::string html = render_html(passing_report());
  EXPECT_NE(html.find("<span id=\"verdict\" class=\"verdict pass\">PASS</span>"), std::string::npos);
  EXPECT_NE(html.find("<span id=\"verdict-line\">2 of 2 checks passed</span>"), std::string::npos);
  EXPECT_EQ(html.find("id=\"why\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"divergence\""), std::string::npos);
  EXPECT_NE(html.find("class=\"num max-abs\" data-value=\"1e-05\">1e-05</td>"), std::string::npos);
}

TEST(ReportHtml, FailingVerdictSaysWhyAndWhatNext) {
  VerifyReport r = passing_report();
  r.checks.push_back(numbers_check("decoder / decode (batch 1, seq 1, past 4)", 0.5, 1e-4,
                                   nlohmann::ordered_json::array({{{"max_abs", 1e-6}, {"mean_abs", 1e-7}},
                                                                  {{"max_abs", 0.25}, {"mean_abs", 0.01}}})));
  const std::string html = render_html(r);
  EXPECT_NE(html.find("<span id=\"verdict\" class=\"verdict fail\">FAIL</span>"), std::string::npos);
  EXPECT_NE(html.find("<span id=\"verdict-line\">2 of 3 checks passed</span>"), std::string::npos);
  const Verdict v = verdict_of(r);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.headline, "FAIL: 2 of 3 checks passed");
  EXPECT_NE(v.why.find("1 of 2 shape cases"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("first diverging layer: 1"), std::string::npos) << v.why;
  EXPECT_NE(v.next.find("layer 1"), std::string::npos) << v.next;
  EXPECT_NE(html.find("<p class=\"why\" id=\"why\"><b>Why:</b> " + html_escape(v.why) + "</p>"), std::string::npos);
  EXPECT_NE(html.find("<p class=\"next\" id=\"next\"><b>What to do:</b> " + html_escape(v.next) + "</p>"), std::string::npos);
  EXPECT_NE(html.find("class=\"layer-bar first-diverging\""), std::string::npos);
  EXPECT_NE(html.find("class=\"num first-diverging-layer\" data-value=\"1\">1</td>"), std::string::npos);
}

TEST(ReportVerdict, RootCauseComesFirst) {
  // A changed source explains the numbers that follow: it is the line shown, not the cascade.
  VerifyReport r = passing_report();
  r.checks.push_back({"source unchanged", false, "model.safetensors changed since the export", "sha256 equal", {}});
  r.checks.push_back(numbers_check("decoder / prompt", 3, 1e-4));
  const Verdict v = verdict_of(r);
  EXPECT_NE(v.why.find("the source checkpoint changed since the export (model.safetensors changed"), std::string::npos) << v.why;
  EXPECT_NE(v.next.find("re-export"), std::string::npos);
  // On another runtime the next step is the reference runtime, which localises the layer.
  VerifyReport ort = passing_report();
  ort.runtime = "onnxruntime";
  ort.checks.push_back(numbers_check("decoder / prompt", 3, 1e-4));
  EXPECT_NE(verdict_of(ort).next.find("hfx verify out/llama --runtime reference"), std::string::npos) << verdict_of(ort).next;
  EXPECT_TRUE(verdict_of(passing_report()).passed);
  EXPECT_EQ(verdict_of(passing_report()).headline, "PASS: 2 of 2 checks passed");
}

TEST(ReportIndex, VerdictPerRuntimeEscaped) {
  const std::vector<RuntimeOutcome> outcomes = {{"reference", true, "13 of 13 checks passed", true},
                                                {"onnxruntime", false, "did not run: a | b <c>", false}};
  const std::string md = render_index_md("out/x", outcomes);
  EXPECT_NE(md.find("Result: **FAIL** (1 of 2 runtimes verified)"), std::string::npos) << md;
  EXPECT_NE(md.find("| onnxruntime | **FAIL** | did not run: a \\| b <c> | not written |"), std::string::npos) << md;
  EXPECT_NE(md.find("[reference/report.md](reference/report.md)"), std::string::npos);
  const std::string html = render_index_html("out/<x>", outcomes);
  EXPECT_NE(html.find("<span id=\"verdict\" class=\"verdict fail\">FAIL</span>"), std::string::npos);
  EXPECT_NE(html.find("did not run: a | b &lt;c&gt;"), std::string::npos);
  EXPECT_NE(html.find("out/&lt;x&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<x>"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"reference/report.html\">"), std::string::npos);
}
