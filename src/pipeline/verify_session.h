// How a format's runtime runs `hfx verify`'s work on an export read back: a session over one
// (artifact, runtime) that runs the shape cases and the greedy prompts and says what it measured
// (load time, where ops ran) and how it computes (the facts verify's gates follow). A backend hands
// one out (Backend::verify_session); verify's checks (pipeline/verify_checks.h) only read what it
// returns, so no check names a runtime. The implementations: hfx's reference executor over the graphs
// read back and the format's own step runners (Backend::make_runner) here; a format with a runtime of
// its own kind (the onnx format's python driver) implements one in its folder (backends/onnx/onnx_verify.cc).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "pipeline/artifact.h"
#include "runtime/executor.h"
#include "runtime/generate.h"
#include "tasks/component.h"

namespace hfx::pipeline {

struct VerifyOptions;

// How a runtime computes, as far as verify's gates and report rows care.
struct RuntimeFacts {
  // The artifact's graphs are its files read back (ArtifactComponent::graph): step inputs follow the
  // artifact's own contract, and a failing case is re-run layer by layer on the reference executor.
  bool graphs_read_back = false;
  // The files keep every dimension the manifest declares (else a dimension may read as dynamic, "?").
  bool exact_dims = false;
  // The runtime's name in the report's words when it rounds MatMulNBits accuracy_level 4 activations to
  // int8 as the reference does; empty: it computes them in f32, and so does the reference.
  std::string int8_activations;
  // Said of an encoder's timing when it includes more than the runs (e.g. a driver process's start).
  std::string runs_timing_note;
};

// One shape case: the component it runs, its step inputs (the reference's names; a session keeps the
// ones the component takes) and, for a component that holds its cache as state, the step run first.
struct SessionCase {
  const ArtifactComponent* component = nullptr;
  std::map<std::string, Tensor> inputs;
  std::optional<std::map<std::string, Tensor>> prefix;
  int64_t positions = 0;  // batch x (sequence + past): its size, for lockstep groups (verify_cases.h)
};

// verify's work for the artifact's side, given in one piece (a driver runs it in one process).
struct SessionWork {
  std::vector<SessionCase> cases;
  bool generate = false;  // a decoder: greedy tokens for `prompts`
  std::vector<std::vector<int64_t>> prompts;
  runtime::SamplingOptions sampling;
  std::filesystem::path scratch;  // removed by verify afterwards
};

// The placement row's content: what ran where, and whether that is as intended.
struct PlacementReport {
  bool passed = true;
  std::string detail;
  std::string gate;  // empty: verify's default gate text
  nlohmann::ordered_json measured = nlohmann::ordered_json::object();
};

struct SessionResult {
  std::vector<std::map<std::string, Tensor>> outputs;  // per case, in order
  // Per case with a prefix, the state the runtime held after it (StepRunner::held_state); may be
  // shorter than `outputs` or hold empty maps where a runtime cannot show its state.
  std::vector<std::map<std::string, Tensor>> held;
  double cases_s = 0;                                  // the cases' wall time
  std::vector<std::vector<int64_t>> tokens;            // per prompt (empty without generate)
  double generate_s = 0;
  double load_s = 0;  // the runtime's own load time, as it counts it
  PlacementReport placement;
};

class VerifySession {
 public:
  virtual ~VerifySession() = default;
  virtual RuntimeFacts facts() const = 0;
  virtual SessionResult run(const SessionWork& work) = 0;
};

// What every session is given: the export read back (its graphs may be rewritten by verify between
// creating the session and running it), the options, and what verify measured while opening it.
struct SessionContext {
  const Artifact& artifact;
  const VerifyOptions& options;
  std::string runtime;
  double open_s = 0;  // open_artifact's time
};

// The sizes verify runs a graph at, for the executor's per-tensor budget (ExecOptions::max_tensor_bytes):
// batch 0 means no budget (graphs hfx built itself from the checkpoint).
struct RunSizes {
  int64_t batch = 0, length = 0;
};

// The sizes an artifact's graphs run at in verify: shape cases up to batch 4 (or the contract's
// minimum) and 64 positions or the static cache; greedy prompts of 7 plus the new tokens.
RunSizes artifact_run_sizes(const Artifact& art, int64_t tokens);

// What the reference executor keeps resident for `g` when it holds its weights between runs: a weight
// read in place (ir::WeightRef::stored_matrix: MatMul, Linear and Gather weights) costs its mapped
// stored bytes, a packed quantized weight its bytes, any other its f32 copy; a table that only row lookups read costs nothing (the few
// rows a prompt reads are noise beside it).
int64_t held_weight_bytes(const ir::Graph& g);

// The bytes (as `g` writes them) of the weights only row lookups read: what an export of `g` holds
// on disk but the reference executor, reading it back in place, leaves unpaged.
int64_t looked_up_weight_bytes(const ir::Graph& g);
// How the reference executor runs `g` (VerifyOptions::reference_weights; auto: held up to
// VerifyOptions::held_weight_limit, streamed above).
runtime::ExecOptions executor_options(const ir::Graph& g, const VerifyOptions& opt, RunSizes sizes = {});

// A graph per role, as verify's greedy check finds the steps: the first (prefill, else decoder) and
// the next (decode, if any). BadInput naming `whose` components when there is no first step.
struct GreedySteps {
  const ir::Graph* first = nullptr;
  const ir::Graph* next = nullptr;
};
GreedySteps greedy_steps(const std::vector<std::pair<std::string, const ir::Graph*>>& by_role, const std::string& whose,
                         const std::filesystem::path& out);

// An encoder-decoder's step runners on the reference executor, from its components by role: the
// encoder, the first-step decoder (null in onnxruntime-genai's layout, whose encoder returns the cross
// state) and the cached step. BadInput naming a missing role.
struct ReferenceSeq2SeqRunners {
  std::unique_ptr<runtime::StepRunner> encoder, first, next;
  DType ids = DType::I64;  // the steps' input_ids
};
ReferenceSeq2SeqRunners reference_seq2seq_runners(const std::vector<tasks::Component>& components,
                                                  const VerifyOptions& opt);

// hfx's reference executor over the graphs read back (a format whose files hfx reads as graphs).
std::unique_ptr<VerifySession> make_executor_session(const class Backend& backend, const SessionContext& ctx);
// The format's own step runners (Backend::make_runner) in this process, timed as the runtime's load.
std::unique_ptr<VerifySession> make_step_session(const class Backend& backend, const SessionContext& ctx);

}  // namespace hfx::pipeline
