#include "pipeline/report_verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hfx::pipeline {

namespace {

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

double number(const nlohmann::ordered_json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return NAN;
  const auto& v = j[key];
  if (v.is_number()) return v.get<double>();
  return v.is_string() && v.get<std::string>() == "inf" ? INFINITY : NAN;
}

// The first layer whose output is over the gate, or -1 (none, or not exposed).
int first_diverging_layer(const CheckResult& c) {
  const double atol = number(c.measured, "atol");
  if (!c.measured.contains("layers")) return -1;
  int i = 0;
  for (const auto& l : c.measured["layers"]) {
    if (!(number(l, "max_abs") <= atol)) return i;
    ++i;
  }
  return -1;
}

Verdict numbers_failed(const VerifyReport& r, const std::vector<const CheckResult*>& failed) {
  Verdict v;
  const CheckResult* worst = failed.front();
  for (const auto* c : failed)
    if (!(number(c->measured, "max_abs") <= number(worst->measured, "max_abs"))) worst = c;
  size_t cases = 0;
  for (const auto& c : r.checks) cases += starts(c.name, "numbers: ");
  const std::string name = worst->name.substr(std::string("numbers: ").size());
  v.why = fmt::format("the artifact's numbers differ from the reference in {} of {} shape cases; worst {}: max abs {:.3g} "
                      "against a gate of {:.3g}",
                      failed.size(), cases, name, number(worst->measured, "max_abs"), number(worst->measured, "atol"));
  if (worst->measured.contains("worst_output") && worst->measured["worst_output"].is_string())
    v.why += fmt::format(" (output {})", worst->measured["worst_output"].get<std::string>());
  const int layer = first_diverging_layer(*worst);
  if (layer >= 0) v.why += fmt::format("; first diverging layer: {}", layer);
  if (r.runtime != "reference")
    v.next = fmt::format("run `hfx verify {} --runtime reference` to see whether hfx's files or {} differ; if the "
                         "difference is expected for this precision or runtime, set the gate with --atol (docs/verify.md)",
                         r.dir.string(), r.runtime);
  else if (layer >= 0)
    v.next = fmt::format("layer {} is the first to compute something else: compare the artifact's ops of that layer with "
                         "the checkpoint's, or re-export (the files may have been edited); --atol sets the gate when "
                         "the difference is expected (docs/verify.md)",
                         layer);
  else
    v.next = "re-export and verify again (the files may have been edited); --atol sets the gate when the difference is "
             "expected for this precision (docs/verify.md)";
  return v;
}

}  // namespace

Verdict verdict_of(const VerifyReport& r) {
  Verdict v;
  const size_t passed = size_t(std::count_if(r.checks.begin(), r.checks.end(), [](const auto& c) { return c.passed; }));
  v.passed = passed == r.checks.size();
  v.summary = fmt::format("{} of {} checks passed", passed, r.checks.size());
  v.headline = fmt::format("{}: {}", v.passed ? "PASS" : "FAIL", v.summary);
  if (v.passed) return v;
  auto failing = [&](const char* prefix) {
    std::vector<const CheckResult*> out;
    for (const auto& c : r.checks)
      if (!c.passed && starts(c.name, prefix)) out.push_back(&c);
    return out;
  };
  // Root causes first: a changed file or source explains every later failure.
  const std::string dir = r.dir.string();
  if (auto f = failing("artifact checksums"); !f.empty()) {
    v.why = fmt::format("a file of the export changed after it was written ({}); the checks after it test changed files",
                        f[0]->detail);
    v.next = fmt::format("re-export, or restore the file; `hfx check {}` lists every file that differs", dir);
  } else if (auto s = failing("source unchanged"); !s.empty()) {
    v.why = fmt::format("the source checkpoint changed since the export ({}); the failures after it follow from that",
                        s[0]->detail);
    v.next = "verify against the checkpoint the export was made from, or re-export from the changed one";
  } else if (auto io = failing("I/O signature"); !io.empty()) {
    v.why = fmt::format("{}: {}", io[0]->name, io[0]->detail);
    v.next = "the files' inputs and outputs are not what hfx.json declares: re-export (a graph or the manifest was edited)";
  } else if (auto n = failing("numbers: "); !n.empty()) {
    Verdict d = numbers_failed(r, n);
    v.why = d.why;
    v.next = d.next;
  } else if (auto g = failing("greedy generation"); !g.empty()) {
    v.why = fmt::format("greedy tokens differ from the reference's ({}) while every shape case's numbers pass", g[0]->detail);
    v.next = "the artifact and the reference part at a near-tie or in the cache across steps: compare the token strips "
             "below, and run `hfx verify` with more --tokens on the reference runtime";
  } else if (auto p = failing("op placement"); !p.empty()) {
    v.why = fmt::format("ops ran off the intended provider or precision ({})", p[0]->detail);
    v.next = "check the runtime's build and its execution provider or inference precision";
  } else if (auto x = failing("re-export"); !x.empty()) {
    v.why = fmt::format("a re-export from the same source and recipe does not reproduce the bytes ({})", x[0]->detail);
    v.next = "compare the hfx versions in hfx.json with this hfx (`hfx --version`); the same hfx must reproduce them, "
             "otherwise report it as a bug";
  } else {
    const CheckResult& c = *std::find_if(r.checks.begin(), r.checks.end(), [](const auto& c) { return !c.passed; });
    v.why = fmt::format("{}: {}", c.name, c.detail);
    v.next = "see that check's detail in the table below";
  }
  return v;
}

}  // namespace hfx::pipeline
