// report.html: the verify report as one self-contained page (inline CSS and SVG, no script, no
// font or file from elsewhere), rendered from the same VerifyReport as report.json and report.md.
// Every number a test compares carries a stable id or class and its exact value in data-value (the
// text shows 3 significant digits); every string that came from a file (paths, output and op names,
// check details) is HTML-escaped.
#pragma once

#include <string>
#include <string_view>

#include "pipeline/verify.h"

namespace hfx::pipeline {

// `s` with & < > " ' replaced by entities: safe in element text and in quoted attributes.
std::string html_escape(std::string_view s);

// The number as the page's data-value holds it: shortest text that reads back as the same double
// ("inf" and "nan" for those), so a test can compare it with report.json's exactly.
std::string html_number(double v);

std::string render_html(const VerifyReport& report);

// The CSS every hfx page shares (report.html, index.html).
const char* report_css();

}  // namespace hfx::pipeline
