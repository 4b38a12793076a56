// `hfx verify` as named checks: verify_export (pipeline/verify.h) builds one VerifyContext (the
// manifest, the recipe, the reference rebuilt from the checkpoint, the artifact read back, the shape
// cases with the oracle's outputs, and what the runtime's session returned for them), then runs
// every check of verify_checks() in order; each reads the context and returns the report rows it adds.
// No check names a runtime: what differs between runtimes is in the session (pipeline/verify_session.h).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/tensor.h"
#include "pipeline/artifact.h"
#include "pipeline/export.h"
#include "pipeline/manifest.h"
#include "pipeline/verify.h"
#include "pipeline/verify_cases.h"
#include "pipeline/verify_session.h"

namespace hfx::pipeline {

class Backend;

// One shape case, both sides: the inputs, the oracle's outputs and the artifact's.
struct CaseRun {
  const ArtifactComponent* comp = nullptr;
  const tasks::Component* refc = nullptr;
  ShapeCase sc;
  std::map<std::string, Tensor> inputs, expected, actual;
  // A stateful artifact (openvino) holds its cache: it is filled by running `prefix` first, and its
  // state outputs are not compared (the next step's logits check them).
  std::optional<std::map<std::string, Tensor>> prefix;
  bool stateful = false;
};

struct VerifyContext {
  VerifyContext(std::filesystem::path out_dir, const VerifyOptions& options) : out(std::move(out_dir)), opt(options) {}
  VerifyContext(const VerifyContext&) = delete;  // the session holds a reference to `art`
  VerifyContext& operator=(const VerifyContext&) = delete;

  std::filesystem::path out;
  const VerifyOptions& opt;
  const Backend* backend = nullptr;  // the format the runtime runs
  std::string format;

  // The oracle: Transformers when asked and able (`oracle_missing` says why not), else the reference.
  std::string oracle_python, oracle_missing;
  bool on_transformers = false;
  std::string oracle_word;  // "the reference" or "Transformers", in check details

  nlohmann::json manifest;
  CheckReport checked;  // check_export, before anything runs; the checksums' part beside the runs
  std::string source_problem;  // what source_problem() found (empty: the checkpoint hashes as at export)
  std::optional<Recipe> parsed;  // for the gates; nullopt when the recipe does not parse (an error later)
  std::filesystem::path source;  // the checkpoint

  Artifact art;
  double open_s = 0;  // open_artifact's time
  Recipe recipe;
  std::optional<LoadedModel> ref;  // the reference, at the export's precision
  int64_t vocab = 0;
  bool causal = false;
  bool seq2seq = false;  // an encoder-decoder: greedy tokens through runtime/seq2seq_generate.h
  // Whether greedy tokens are compared (a decoder's or an encoder-decoder's steps).
  bool generates() const { return causal || seq2seq; }

  std::unique_ptr<VerifySession> session;
  RuntimeFacts facts;

  std::vector<CheckResult> case_notes;  // found while picking the shape cases (skipped, no reference)
  std::vector<CaseRun> runs;
  int64_t tokens = 0;  // greedy tokens that fit the contract
  std::vector<std::vector<int64_t>> prompts, expected_tokens;
  SessionResult artifact;  // the artifact's side, from the session
  double runs_s = 0;       // the artifact's shape cases (an encoder's performance figure)
  std::optional<ScratchDirectory> scratch;

  // The gates. Each component's follows its own precision (recipe "components" may override it).
  bool int8_activations(const std::string& role) const;
  bool f16_activations(const std::string& role) const;
  double atol_for(const std::string& role) const;
  std::string tol_numbers(const std::string& role) const;
};

// The first source file (of the manifest's `source.files`) that is missing, moved out of `source` or
// no longer hashes as at export, as a sentence; empty when every one matches.
std::string source_problem(const std::filesystem::path& source, const nlohmann::json& manifest);

// Builds the context: settles the oracle, reads the export and its source, rebuilds the reference,
// runs the oracle and the artifact (through the backend's session) over the shape cases and prompts.
void build_verify_context(VerifyContext& ctx);

// A named check: what it proves, and the rows it adds to the report (none when it does not apply).
struct Check {
  const char* name;
  std::vector<CheckResult> (*run)(const VerifyContext& ctx);
};
// In report order: artifact checksums, oracle, source unchanged, I/O signature, shape cases, numbers,
// greedy generation, op placement, performance, re-export.
const std::vector<Check>& verify_checks();

}  // namespace hfx::pipeline
