#include "pipeline/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "pipeline/report_verdict.h"

namespace hfx::pipeline {

using json = nlohmann::ordered_json;

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string html_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);  // fmt's shortest round-trip form
}

const char* report_css() {
  return R"(body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:980px;color:#1d2330;padding:0 16px}
h1{font-size:26px;margin:0 0 6px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde1e8;padding-bottom:4px}
.verdict{display:inline-block;padding:2px 12px;border-radius:6px;color:#fff}.verdict.pass{background:#1a7f37}.verdict.fail{background:#cf222e}
.why,.next{margin:6px 0;padding:8px 12px;border-radius:6px}.why{background:#ffebe9;border-left:4px solid #cf222e}.next{background:#fff8c5;border-left:4px solid #bf8700}
.meta{color:#57606a}code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f3f4f6;padding:1px 4px;border-radius:4px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.ok{color:#1a7f37;font-weight:600}.bad{color:#cf222e;font-weight:600}
svg{display:block;margin:6px 0}svg text{font:11px system-ui,sans-serif;fill:#1d2330}
.strip{font:12px ui-monospace,Menlo,monospace;margin:2px 0 10px}.strip .who{display:inline-block;width:80px;color:#57606a}
.tok{display:inline-block;min-width:28px;text-align:center;margin:1px;padding:1px 3px;border-radius:3px;background:#eef1f5}
.tok.diff{background:#ffd8d3}.tok.first-diff{outline:2px solid #cf222e;font-weight:700}.tok.missing{background:#fff;color:#8c959f}
.detail{color:#57606a;font-size:12px})";
}

namespace {

double num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return NAN;
  const auto& v = j[key];
  if (v.is_number()) return v.get<double>();
  return v.is_string() && v.get<std::string>() == "inf" ? INFINITY : NAN;
}

std::string short_number(double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : html_number(v); }

// A cell holding a number: the text shows 3 digits, data-value the exact value.
std::string num_cell(const std::string& cls, double v) {
  return fmt::format("<td class=\"num {}\" data-value=\"{}\">{}</td>", cls, html_number(v), short_number(v));
}

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Log-scale position in [0, 1] of `v` between 10^lo and 10^hi; 0 and below sit at 0, inf at 1.
double log_pos(double v, double lo, double hi) {
  if (!(v > 0)) return 0;
  if (!std::isfinite(v)) return 1;
  return std::clamp((std::log10(v) - lo) / (hi - lo), 0.0, 1.0);
}

// The decades a log axis spans: one below the smallest positive value, one above the largest finite.
std::pair<double, double> decades(const std::vector<double>& values) {
  double lo = INFINITY, hi = -INFINITY;
  for (double v : values)
    if (v > 0 && std::isfinite(v)) lo = std::min(lo, std::log10(v)), hi = std::max(hi, std::log10(v));
  if (!std::isfinite(lo)) return {-8, 0};
  lo = std::floor(lo) - 1;
  hi = std::ceil(hi) + 1;
  if (hi - lo < 3) lo = hi - 3;
  return {lo, hi};
}

std::string axis_ticks(double lo, double hi, double x0, double width, double y0, double y1, bool vertical) {
  std::string s;
  const double step = hi - lo > 10 ? 2 : 1;
  for (double d = lo; d <= hi + 1e-9; d += step) {
    const double p = (d - lo) / (hi - lo);
    if (vertical) {
      const double x = x0 + p * width;
      s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eaeef2\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">1e{4:g}</text>",
                       x, y0, y1, y1 + 13, d);
    } else {  // horizontal grid lines on a vertical axis: y0 is the bottom, width the height
      const double y = y0 - p * width;
      s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#eaeef2\"/>"
                       "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">1e{5:g}</text>",
                       x0, y, y1, x0 - 4, y + 4, d);
    }
  }
  return s;
}

struct NumbersCase {
  std::string name;
  bool passed;
  double max_abs, mean_abs, atol;
  int64_t mismatched, elements;
  const CheckResult* check;
};

std::vector<NumbersCase> numbers_cases(const VerifyReport& r) {
  std::vector<NumbersCase> out;
  for (const auto& c : r.checks) {
    if (!starts(c.name, "numbers: ") || !c.measured.contains("max_abs")) continue;
    out.push_back({c.name.substr(9), c.passed, num(c.measured, "max_abs"), num(c.measured, "mean_abs"),
                   num(c.measured, "atol"), c.measured.value("mismatched", int64_t(0)), c.measured.value("elements", int64_t(0)),
                   &c});
  }
  return out;
}

// Per shape case, a horizontal bar of the max abs error with its gate as a tick, on a log axis.
std::string cases_chart(const std::vector<NumbersCase>& cases) {
  std::vector<double> values;
  for (const auto& c : cases) values.push_back(c.max_abs), values.push_back(c.atol);
  const auto [lo, hi] = decades(values);
  const double label_w = 380, chart_w = 440, row_h = 20, top = 8;
  const double h = top + row_h * double(cases.size()) + 24;
  std::string s = fmt::format("<svg id=\"cases-chart\" width=\"{:.0f}\" height=\"{:.0f}\" role=\"img\" "
                              "aria-label=\"max abs error per shape case against its gate, log scale\">",
                              label_w + chart_w + 20, h);
  s += axis_ticks(lo, hi, label_w, chart_w, top, top + row_h * double(cases.size()), true);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const double y = top + row_h * double(i);
    const double bar = log_pos(c.max_abs, lo, hi) * chart_w, gate = label_w + log_pos(c.atol, lo, hi) * chart_w;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", label_w - 6, y + 14, html_escape(c.name));
    s += fmt::format("<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>", label_w,
                     y + 3, std::max(bar, 1.0), row_h - 6, c.passed ? "#4c9f70" : "#d1495b");
    s += fmt::format("<line class=\"gate\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#1d2330\" "
                     "stroke-width=\"2\"/>",
                     gate, y + 1, y + row_h - 1);
  }
  s += "</svg>";
  return s;
}

// Per decoder layer, a vertical bar of its output's max abs difference, the gate as a line, the
// first layer over it outlined.
std::string layers_chart(const NumbersCase& c, size_t index) {
  const auto& layers = c.check->measured["layers"];
  std::vector<double> values = {c.atol};
  for (const auto& l : layers) values.push_back(num(l, "max_abs"));
  const auto [lo, hi] = decades(values);
  const double left = 56, plot_h = 160, top = 10, col_w = std::clamp(600.0 / double(layers.size()), 14.0, 48.0);
  const double bottom = top + plot_h;
  std::string s = fmt::format("<svg class=\"layers-chart\" id=\"layers-chart-{}\" width=\"{:.0f}\" height=\"{:.0f}\" role=\"img\" "
                              "aria-label=\"max abs difference per layer output, log scale\">",
                              index, left + col_w * double(layers.size()) + 20, bottom + 34);
  s += axis_ticks(lo, hi, left, plot_h, bottom, left + col_w * double(layers.size()), false);
  bool first_found = false;
  for (size_t i = 0; i < layers.size(); ++i) {
    const double v = num(layers[i], "max_abs");
    const bool over = !(v <= c.atol);
    const bool first = over && !first_found;
    first_found = first_found || over;
    const double bh = log_pos(v, lo, hi) * plot_h, x = left + col_w * double(i);
    s += fmt::format("<rect class=\"layer-bar{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"{}/>",
                     first ? " first-diverging" : "", x + 2, bottom - std::max(bh, 1.0), col_w - 4, std::max(bh, 1.0),
                     over ? "#d1495b" : "#4c9f70", first ? " stroke=\"#1d2330\" stroke-width=\"2\"" : "");
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", x + col_w / 2, bottom + 13, i);
  }
  const double gy = bottom - log_pos(c.atol, lo, hi) * plot_h;
  s += fmt::format("<line class=\"gate\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#1d2330\" "
                   "stroke-dasharray=\"4 3\"/><text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">layer</text>",
                   left, gy, left + col_w * double(layers.size()), gy, left + col_w * double(layers.size()) / 2, bottom + 28);
  s += "</svg>";
  return s;
}

std::string numbers_section(const VerifyReport& r) {
  const auto cases = numbers_cases(r);
  if (cases.empty()) return "";
  std::string s = "<section id=\"numbers\"><h2>Error against the gate, per shape case</h2>"
                  "<p class=\"detail\">Bars: the largest absolute difference from the reference (log scale); black tick: "
                  "the case's gate. Red: over the gate.</p>";
  s += cases_chart(cases);
  s += "<table id=\"cases\"><tr><th>shape case</th><th>result</th><th>max abs</th><th>gate</th><th>mean abs</th>"
       "<th>over tolerance</th><th>elements</th></tr>";
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    s += fmt::format("<tr class=\"case\" id=\"case-{}\"><td class=\"case-name\">{}</td><td class=\"result {}\">{}</td>", i,
                     html_escape(c.name), c.passed ? "ok" : "bad", c.passed ? "pass" : "FAIL");
    s += num_cell("max-abs", c.max_abs) + num_cell("atol", c.atol) + num_cell("mean-abs", c.mean_abs);
    s += fmt::format("<td class=\"num mismatched\" data-value=\"{0}\">{0}</td><td class=\"num elements\" data-value=\"{1}\">{1}</td></tr>",
                     c.mismatched, c.elements);
  }
  s += "</table></section>";

  return s;
}

// The first layer of a case whose output is over its gate, or -1.
int first_over(const NumbersCase& c) {
  int i = 0;
  for (const auto& l : c.check->measured["layers"]) {
    if (!(num(l, "max_abs") <= c.atol)) return i;
    ++i;
  }
  return -1;
}

// On failure, each decoder layer's output difference: a chart for the worst failing case, and a row
// per failing case (one line each, so the same diagnosis is not repeated per case).
std::string divergence_section(const VerifyReport& r) {
  const auto cases = numbers_cases(r);
  std::vector<size_t> failing;
  size_t layer_count = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].passed) continue;
    failing.push_back(i);
    const json& m = cases[i].check->measured;
    if (m.contains("layers") && m["layers"].is_array()) layer_count = std::max(layer_count, m["layers"].size());
  }
  if (failing.empty()) return "";
  std::string s = "<section id=\"divergence\"><h2>Where the numbers diverge, per layer</h2>";
  if (layer_count > 0) {
    size_t worst = failing.front();
    for (size_t i : failing)
      if (cases[i].check->measured["layers"].size() > 0 &&
          (cases[worst].check->measured["layers"].empty() || !(cases[i].max_abs <= cases[worst].max_abs)))
        worst = i;
    s += fmt::format("<p class=\"detail\">Each decoder layer's output against the reference's (log scale) on the worst "
                     "failing case, <b>{}</b>; dashed: the gate; outlined: the first layer over it.</p>",
                     html_escape(cases[worst].name));
    s += layers_chart(cases[worst], worst);
  }
  s += "<table id=\"layers-table\"><tr><th>failing shape case</th><th>worst output</th><th>first diverging layer</th>";
  for (size_t l = 0; l < layer_count; ++l) s += fmt::format("<th>layer {} max abs</th>", l);
  s += layer_count ? "</tr>" : "<th>diagnosis</th></tr>";
  for (size_t i : failing) {
    const auto& c = cases[i];
    const json& m = c.check->measured;
    const bool has_layers = m.contains("layers") && m["layers"].is_array() && !m["layers"].empty();
    const int first = has_layers ? first_over(c) : -1;
    s += fmt::format("<tr class=\"layers\" id=\"layers-{}\"><td>{}</td><td><code class=\"worst-output\">{}</code></td>"
                     "<td class=\"num first-diverging-layer\" data-value=\"{}\">{}</td>",
                     i, html_escape(c.name),
                     html_escape(m.contains("worst_output") && m["worst_output"].is_string() ? m["worst_output"].get<std::string>() : ""),
                     first, first >= 0 ? std::to_string(first) : has_layers ? "none" : "not exposed");
    if (!layer_count) {
      s += fmt::format("<td class=\"detail\">{}</td></tr>", html_escape(c.check->detail));
      continue;
    }
    for (size_t l = 0; l < layer_count; ++l)
      s += has_layers && l < m["layers"].size() ? num_cell("layer-max-abs", num(m["layers"][l], "max_abs")) : "<td></td>";
    s += "</tr>";
  }
  return s + "</table></section>";
}

std::string strip(const std::vector<int64_t>& mine, const std::vector<int64_t>& other, size_t first, const char* who,
                  const std::string& id) {
  std::string s = fmt::format("<div class=\"strip\" id=\"{}\"><span class=\"who\">{}</span>", id, who);
  for (size_t i = 0; i < mine.size(); ++i) {
    const bool same = i < other.size() && other[i] == mine[i];
    s += fmt::format("<span class=\"tok{}{}\" data-value=\"{}\">{}</span>", same ? "" : " diff", i == first ? " first-diff" : "",
                     mine[i], mine[i]);
  }
  return s + "</div>";
}

std::string greedy_section(const VerifyReport& r) {
  const CheckResult* g = nullptr;
  for (const auto& c : r.checks)
    if (starts(c.name, "greedy generation")) g = &c;
  if (!g || !g->measured.contains("expected") || !g->measured.contains("actual")) return "";
  std::vector<std::vector<int64_t>> expected, actual;
  try {
    expected = g->measured["expected"].get<std::vector<std::vector<int64_t>>>();
    actual = g->measured["actual"].get<std::vector<std::vector<int64_t>>>();
  } catch (const json::exception&) {
    return "";
  }
  std::string s = fmt::format("<section id=\"greedy\"><h2>Greedy tokens: artifact and reference</h2><p>{} <span class=\"{}\">{}</span>"
                              "</p><p class=\"detail\">Token ids per row; red: differs from the other side; outlined: the "
                              "first divergence.</p>",
                              html_escape(g->name), g->passed ? "ok" : "bad", html_escape(g->detail));
  for (size_t b = 0; b < std::max(expected.size(), actual.size()); ++b) {
    const auto e = b < expected.size() ? expected[b] : std::vector<int64_t>{};
    const auto a = b < actual.size() ? actual[b] : std::vector<int64_t>{};
    size_t first = 0;
    while (first < e.size() && first < a.size() && e[first] == a[first]) ++first;
    const bool same = first == e.size() && first == a.size();
    s += fmt::format("<div class=\"row\" id=\"greedy-row-{}\" data-first-divergence=\"{}\"><h3>row {}: {}</h3>", b,
                     same ? "none" : std::to_string(first), b,
                     same ? "identical" : fmt::format("first divergence at token {}", first));
    s += strip(a, e, same ? SIZE_MAX : first, "artifact", fmt::format("greedy-row-{}-actual", b));
    s += strip(e, a, same ? SIZE_MAX : first, "reference", fmt::format("greedy-row-{}-expected", b));
    s += "</div>";
  }
  return s + "</section>";
}

std::string performance_section(const VerifyReport& r) {
  const CheckResult* p = nullptr;
  for (const auto& c : r.checks)
    if (c.name == "performance") p = &c;
  if (!p || !p->measured.is_object()) return "";
  std::string s = "<section id=\"performance\"><h2>Performance</h2><p class=\"detail\">" + html_escape(p->tolerance) +
                  "</p><table id=\"performance-table\"><tr><th>measure</th><th>value</th></tr>";
  for (const auto& [key, v] : p->measured.items()) {
    s += fmt::format("<tr><td>{}</td>", html_escape(key));
    if (v.is_number())
      s += fmt::format("<td class=\"num\" id=\"perf-{}\" data-value=\"{}\">{}</td></tr>", html_escape(key),
                       html_number(v.get<double>()), v.is_number_integer() ? std::to_string(v.get<int64_t>()) : short_number(v.get<double>()));
    else
      s += fmt::format("<td id=\"perf-{}\">{}</td></tr>", html_escape(key), html_escape(v.is_string() ? v.get<std::string>() : v.dump()));
  }
  return s + "</table></section>";
}

// op -> where (provider, or precision) -> count, as report.json's "op placement" measured holds it.
std::string placement_section(const VerifyReport& r) {
  const CheckResult* p = nullptr;
  for (const auto& c : r.checks)
    if (c.name == "op placement") p = &c;
  if (!p) return "";
  std::string s = fmt::format("<section id=\"placement\"><h2>Op placement</h2><p><span class=\"{}\">{}</span> {}</p>",
                              p->passed ? "ok" : "bad", p->passed ? "pass" : "FAIL", html_escape(p->tolerance));
  s += "<table id=\"placement-table\"><tr><th>op</th><th>where</th><th>nodes</th></tr>";
  if (p->measured.is_object())
    for (const auto& [op, where] : p->measured.items()) {
      if (!where.is_object()) continue;
      for (const auto& [w, n] : where.items())
        s += fmt::format("<tr class=\"placement\"><td class=\"op\">{}</td><td class=\"where\">{}</td><td class=\"num count\" "
                         "data-value=\"{}\">{}</td></tr>",
                         html_escape(op), html_escape(w), n.dump(), html_escape(n.dump()));
    }
  return s + "</table></section>";
}

std::string checks_section(const VerifyReport& r) {
  std::string s = "<section id=\"checks\"><h2>Every check</h2><table id=\"checks-table\"><tr><th>check</th><th>result</th>"
                  "<th>detail</th><th>gate</th></tr>";
  for (const auto& c : r.checks)
    s += fmt::format("<tr class=\"check\"><td class=\"check-name\">{}</td><td class=\"result {}\">{}</td><td class=\"detail\">{}</td>"
                     "<td class=\"detail\">{}</td></tr>",
                     html_escape(c.name), c.passed ? "ok" : "bad", c.passed ? "pass" : "FAIL", html_escape(c.detail),
                     html_escape(c.tolerance));
  return s + "</table></section>";
}

}  // namespace

std::string render_html(const VerifyReport& r) {
  const Verdict v = verdict_of(r);
  std::string s = fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>hfx verify: {} ({})</title>"
                              "<style>{}</style></head><body>",
                              html_escape(r.dir.string()), html_escape(r.runtime), report_css());
  s += fmt::format("<header><h1><span id=\"verdict\" class=\"verdict {}\">{}</span> <span id=\"verdict-line\">{}</span></h1>",
                   v.passed ? "pass" : "fail", v.passed ? "PASS" : "FAIL", html_escape(v.summary));
  if (!v.passed)
    s += fmt::format("<p class=\"why\" id=\"why\"><b>Why:</b> {}</p><p class=\"next\" id=\"next\"><b>What to do:</b> {}</p>",
                     html_escape(v.why), html_escape(v.next));
  s += fmt::format("<p class=\"meta\">Export <code id=\"export-dir\">{}</code>, runtime <code id=\"runtime\">{}</code>.</p></header>",
                   html_escape(r.dir.string()), html_escape(r.runtime));
  s += numbers_section(r) + greedy_section(r) + divergence_section(r) + performance_section(r) + placement_section(r) + checks_section(r);
  return s + "</body></html>\n";
}

}  // namespace hfx::pipeline
