// Where `hfx verify` writes its reports, and how: one folder per runtime, OUT/verify/<runtime>/ (or
// DIR/<runtime>/ under --report DIR), each holding report.json, report.md and report.html; and for
// `--runtime all` an index (index.md, index.html) in OUT/verify (or DIR) with each runtime's verdict.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "pipeline/verify.h"

namespace hfx::pipeline {

// Writes report.json, report.md and report.html into `dir`/<runtime>, or OUT/verify/<runtime> when
// `dir` is empty (created when missing, `dir` with its parents). Never through a link: each folder
// must not be a symlink (opened O_DIRECTORY|O_NOFOLLOW, and written relative to that descriptor, so a
// link swapped in meanwhile changes nothing), and each report goes to a new file
// (O_CREAT|O_EXCL|O_NOFOLLOW) renamed over its name, which replaces a symlink there rather than
// writing to its target. Io errors name the folder: "OUT/verify is a symlink; not writing through
// it", "OUT is read-only: report not written (use --report DIR)". Returns the runtime's folder.
std::filesystem::path write_reports(const VerifyReport& report, const std::filesystem::path& dir = {});

// One runtime's line in the index of `hfx verify --runtime all`.
struct RuntimeOutcome {
  std::string runtime;
  bool passed = false;
  std::string summary;  // "13 of 13 checks passed", or why it could not run
  bool has_report = false;  // <runtime>/report.{md,html} was written
};

// Writes index.md and index.html into `dir`, or OUT/verify when empty, under the same rules as
// write_reports. Returns the folder.
std::filesystem::path write_report_index(const std::filesystem::path& out, const std::vector<RuntimeOutcome>& outcomes,
                                         const std::filesystem::path& dir = {});

std::string render_index_md(const std::filesystem::path& out, const std::vector<RuntimeOutcome>& outcomes);
std::string render_index_html(const std::filesystem::path& out, const std::vector<RuntimeOutcome>& outcomes);

}  // namespace hfx::pipeline
