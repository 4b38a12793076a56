// The top of every verify report (json, md, html): PASS or FAIL, and on failure one line saying why
// it failed and one saying what to do next. Derived from the checks alone (a pure function), so the
// three renderers say the same thing and the unit tests can feed it hand-made reports.
#pragma once

#include <string>

#include "pipeline/verify.h"

namespace hfx::pipeline {

struct Verdict {
  bool passed = true;
  std::string summary;   // "13 of 13 checks passed"
  std::string headline;  // "PASS: 13 of 13 checks passed" / "FAIL: 11 of 13 checks passed"
  std::string why;       // on failure: the root cause, from the first failing check that explains the others
  std::string next;      // on failure: what to do about it
};

Verdict verdict_of(const VerifyReport& report);

}  // namespace hfx::pipeline
