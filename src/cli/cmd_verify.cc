// `hfx verify`: the artifact contract, checked against the source checkpoint.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"
#include "pipeline/report_files.h"
#include "pipeline/verify.h"
#include "pipeline/verify_runtimes.h"

namespace fs = std::filesystem;

namespace hfx::cli {

namespace {

// Verifies on opt.runtime, prints each check (after `prefix`) and the summary line, writes the
// runtime's reports. The default place is inside the export, which may be read-only or
// booby-trapped: the checks are the result, the report a copy of them, so its absence is said but
// does not fail verify; a --report DIR asked for must work.
pipeline::RuntimeOutcome verify_one(const fs::path& dir, const pipeline::VerifyOptions& opt, const fs::path& report_dir,
                                    const std::string& prefix) {
  auto report = pipeline::verify_export(dir, opt);
  for (const auto& c : report.checks) fmt::print("{}{} {}: {}\n", prefix, c.passed ? "pass" : "FAIL", c.name, c.detail);
  std::string where;
  if (report_dir.empty()) {
    try {
      where = (pipeline::write_reports(report) / "report.md").string();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Io) throw;
      std::fflush(stdout);
      fmt::print(stderr, "hfx: {}\n", e.describe());
    }
  } else {
    where = (pipeline::write_reports(report, report_dir) / "report.md").string();
  }
  const auto passed = size_t(std::count_if(report.checks.begin(), report.checks.end(), [](const auto& c) { return c.passed; }));
  fmt::print("{}{}: {} ({} checks){}\n", prefix, dir.string(), report.passed() ? "verified" : "verification FAILED",
             report.checks.size(), where.empty() ? "; report not written" : "; report in " + where);
  return {opt.runtime, report.passed(), fmt::format("{} of {} checks passed", passed, report.checks.size()), !where.empty()};
}

}  // namespace

void register_verify(CLI::App& app, Action& action) {
  auto opt = std::make_shared<pipeline::VerifyOptions>();
  auto dir = std::make_shared<fs::path>();
  auto atol = std::make_shared<double>(0);
  auto no_reexport = std::make_shared<bool>(false);
  auto report_dir = std::make_shared<fs::path>();
  auto* cmd = app.add_subcommand("verify", "Prove an export: numbers, shapes, greedy tokens, ops, speed, reproducibility.");
  cmd->add_option("out", *dir, "Export folder (with hfx.json)")->required();
  auto runtime = std::make_shared<std::string>();
  cmd->add_option("--runtime", *runtime,
                  "Runtime that runs the artifact: reference | onnxruntime (the onnx files) | openvino (the openvino files, "
                  "CPU plugin in f32) | torch (the pt2 files) | executorch (the pte files) | all (every runtime of every format in the export); "
                  "`hfx formats` lists them. Default: reference for an export with onnx files, else the runtime of its format");
  cmd->add_option("--tokens", opt->tokens, "Greedy tokens compared with the reference (at least 1)")->capture_default_str();
  auto* atol_option = cmd->add_option("--atol", *atol, "Override every component's tolerance (a positive number; default per precision, docs/verify.md)");
  cmd->add_flag("--no-reexport", *no_reexport, "Skip the re-export byte comparison");
  cmd->add_option("--reference-weights", opt->reference_weights,
                  "How the reference executor holds weights between runs: hold (MatMul and Gather weights stay mapped "
                  "where they lie in the files, the others converted to f32 once: fastest) | stream (each weight read per "
                  "run and released after use: memory near the largest weight) | auto (hold a graph's weights up to an "
                  "eighth of the memory available, stream above, keeping a streamed graph's packed quantized weights "
                  "mapped up to the same limit; the check `hfx export` runs holds up to 512 MiB)")
      ->check(CLI::IsMember({"auto", "hold", "stream"}))
      ->capture_default_str();
  cmd->add_option("--python", opt->python,
                  "Python with onnxruntime for --runtime onnxruntime, and with torch and transformers for --oracle "
                  "transformers (default: $HFX_PYTHON)");
  cmd->add_option("--oracle", opt->oracle,
                  "What the artifact is compared with: reference (hfx's reference executor on hfx's own definition of "
                  "the checkpoint) | transformers (Transformers eager on the checkpoint, safetensors only, no remote "
                  "code; an error when the Python lacks torch or transformers) | auto (transformers when it runs, else "
                  "reference with a note)")
      ->check(CLI::IsMember({"reference", "transformers", "auto"}))
      ->capture_default_str();
  cmd->add_option("--model", opt->model_dir,
                  "The source checkpoint folder, when not where hfx.json says (moved, or on another machine); its "
                  "files must still hash as at export");
  cmd->add_option("--report", *report_dir,
                  "Write the reports under DIR (created if needed) instead of OUT/verify, e.g. for a read-only export");
  cmd->footer("Writes report.json, report.md and report.html to OUT/verify/RUNTIME (or --report DIR/RUNTIME), never "
              "through a symlink, and with --runtime all an index.md and index.html beside the runtimes' folders; when "
              "OUT/verify cannot be written (a read-only OUT, a symlink) the checks still run and print, and a "
              "line on stderr says the report was not written. Exits 1 when a check fails (on any runtime).");
  cmd->callback([=, &action] {
    action = [=] {
      // Strict like every other option: 0 or a negative number is a mistake, not "the default" (F#11).
      if (atol_option->count()) {
        if (!(*atol > 0) || !std::isfinite(*atol))
          usage_error("--atol {}: expected a positive number (the largest allowed absolute difference, e.g. 1e-4)", *atol);
        opt->atol = *atol;
      }
      if (opt->tokens < 1) usage_error("--tokens {}: expected at least 1 (the greedy tokens compared)", opt->tokens);
      if (!fs::is_directory(*dir)) bad_input("{}: no such export folder", dir->string());
      if (!opt->model_dir.empty() && !fs::is_directory(opt->model_dir))
        bad_input("--model {}: no such checkpoint folder", opt->model_dir.string());
      opt->reexport = !*no_reexport;
      opt->held_weight_limit = pipeline::held_weights_to_spare();
      // F#8: an OpenVINO-only or pt2-only export is verified on its own runtime without being told.
      std::vector<std::string> runtimes = {runtime->empty() ? pipeline::default_runtime(*dir) : *runtime};
      if (runtimes[0] == "all") runtimes = pipeline::all_runtimes(*dir);
      const bool several = *runtime == "all";
      std::vector<pipeline::RuntimeOutcome> outcomes;
      for (const auto& rt : runtimes) {
        opt->runtime = rt;
        if (!several) {
          outcomes.push_back(verify_one(*dir, *opt, *report_dir, ""));
          break;
        }
        try {  // one runtime that cannot run (no Python, a backend not built) does not hide the others
          outcomes.push_back(verify_one(*dir, *opt, *report_dir, "[" + rt + "] "));
        } catch (const Error& e) {
          std::fflush(stdout);
          fmt::print(stderr, "hfx: --runtime {}: {}\n", rt, e.describe());
          outcomes.push_back({rt, false, "did not run: " + e.describe(), false});
        }
      }
      const bool passed = std::all_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.passed; });
      if (several) {
        std::string where;
        try {
          where = (pipeline::write_report_index(*dir, outcomes, *report_dir) / "index.md").string();
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Io || !report_dir->empty()) throw;
          std::fflush(stdout);
          fmt::print(stderr, "hfx: {}\n", e.describe());
        }
        std::vector<std::string> failed;
        for (const auto& o : outcomes)
          if (!o.passed) failed.push_back(o.runtime);
        fmt::print("{}: {}{}\n", dir->string(),
                   passed ? fmt::format("verified on every runtime ({})", fmt::join(runtimes, ", "))
                          : fmt::format("verification FAILED on {} of {} runtimes ({})", failed.size(), runtimes.size(),
                                        fmt::join(failed, ", ")),
                   where.empty() ? "; index not written" : "; index in " + where);
      }
      return passed ? 0 : 1;
    };
  });
}

}  // namespace hfx::cli
