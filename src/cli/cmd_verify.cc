// `hfx verify`: the artifact contract, checked against the source checkpoint.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"
#include "pipeline/verify.h"

namespace fs = std::filesystem;

namespace hfx::cli {

void register_verify(CLI::App& app, Action& action) {
  auto opt = std::make_shared<pipeline::VerifyOptions>();
  auto dir = std::make_shared<fs::path>();
  auto atol = std::make_shared<double>(0);
  auto no_reexport = std::make_shared<bool>(false);
  auto report_dir = std::make_shared<fs::path>();
  auto* cmd = app.add_subcommand("verify", "Prove an export: numbers, shapes, greedy tokens, ops, speed, reproducibility.");
  cmd->add_option("out", *dir, "Export folder (with hfx.json)")->required();
  cmd->add_option("--runtime", opt->runtime, "Runtime that runs the artifact: reference | onnxruntime (the onnx files) | openvino (the openvino files, CPU plugin in f32); `hfx formats` lists them")->capture_default_str();
  cmd->add_option("--tokens", opt->tokens, "Greedy tokens compared with the reference (at least 1)")->capture_default_str();
  auto* atol_option = cmd->add_option("--atol", *atol, "Override every component's tolerance (a positive number; default per precision, docs/verify.md)");
  cmd->add_flag("--no-reexport", *no_reexport, "Skip the re-export byte comparison");
  cmd->add_option("--reference-weights", opt->reference_weights,
                  "How the reference executor holds weights: hold (converted to f32 once: fast, ~4x the model's f32 "
                  "size at peak) | stream (read per run, dropped after use: memory near the largest tensor, slower) | "
                  "auto (hold while that fits in half of the available memory)")
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
                  "Write report.json and report.md to DIR (created if needed) instead of OUT/verify, e.g. for a "
                  "read-only export");
  cmd->footer("Writes report.json and report.md to OUT/verify (or --report DIR), never through a symlink; when "
              "OUT/verify cannot be written (a read-only OUT, a symlink) the checks still run and print, and a "
              "line on stderr says the report was not written. Exits 1 when a check fails.");
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
      auto report = pipeline::verify_export(*dir, *opt);
      for (const auto& c : report.checks) fmt::print("{} {}: {}\n", c.passed ? "pass" : "FAIL", c.name, c.detail);
      std::string where;
      if (report_dir->empty()) {
        // The default place is inside the export, which may be read-only or booby-trapped: the checks
        // are the result, the report a copy of them, so its absence is said but does not fail verify.
        try {
          where = (pipeline::write_reports(report) / "report.md").string();
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Io) throw;
          std::fflush(stdout);
          fmt::print(stderr, "hfx: {}\n", e.describe());
        }
      } else {
        where = (pipeline::write_reports(report, *report_dir) / "report.md").string();  // asked for: must work
      }
      fmt::print("{}: {} ({} checks){}\n", dir->string(), report.passed() ? "verified" : "verification FAILED",
                 report.checks.size(), where.empty() ? "; report not written" : "; report in " + where);
      return report.passed() ? 0 : 1;
    };
  });
}

}  // namespace hfx::cli
