// An export read back for running: the manifest, and each component's graph read from its file
// with the contract's bounds restored from the manifest.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/graph.h"
#include "runtime/generate.h"
#include "runtime/seq2seq_generate.h"

namespace hfx::pipeline {

struct ArtifactComponent {
  std::string role;
  std::filesystem::path file;
  ir::Graph graph;  // read back for onnx only (empty for other formats)
  std::vector<std::string> declared_inputs;   // the manifest's input names, in order
  std::vector<std::string> declared_outputs;  // the manifest's output names, in order
  // (input, output) ports updated in place (the static cache), from the manifest's cache section.
  std::vector<std::pair<std::string, std::string>> shared_buffers;
};

struct Artifact {
  std::filesystem::path dir;
  nlohmann::json manifest;
  std::vector<ArtifactComponent> components;
  // The state its decoder steps carry (none for an encoder), rebuilt by the contract from the
  // manifest's model geometry and recipe (tasks/state.h).
  runtime::CacheSpec cache;
  int64_t num_layers = 0;  // the model's, from the manifest
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = 0;
  // An encoder-decoder's (its components encoder, decoder, decoder_with_past): the token its decoded
  // sequences start from.
  std::optional<int64_t> decoder_start_token_id;
  // A speech encoder-decoder's (Whisper's) input geometry: its encoder reads input_features.
  std::optional<runtime::SpeechSource> speech;

  // Whether it is an encoder-decoder's export: decoded by runtime/seq2seq_generate.h.
  bool seq2seq() const { return decoder_start_token_id.has_value(); }
  // The component with `role`, or the first when role is empty; BadInput naming the roles otherwise.
  const ArtifactComponent& component(const std::string& role) const;
  // The component with `role`, or null (an encoder-decoder in onnxruntime-genai's layout has no
  // first-step `decoder`).
  const ArtifactComponent* find(const std::string& role) const;
  // An encoder-decoder's decoder steps: its first-step and with-past graphs (no first-step graph in
  // onnxruntime-genai's layout: null, decoder_with_past runs from an empty past), or, in OpenVINO's
  // stateful layout, the merged decoder for both (it holds the state: run both steps on one runner).
  struct DecoderSteps {
    const ArtifactComponent* first;
    const ArtifactComponent* next;
  };
  DecoderSteps decoder_steps() const;
};

// Reads OUT/hfx.json and the components of `format`; fails on a missing or inconsistent manifest or
// a missing component file.
Artifact open_artifact(const std::filesystem::path& dir, const std::string& format);

// BadInput unless the component's graph (onnx, read back) computes exactly the outputs its manifest
// entry declares: a graph with an extra output computes work nobody asked for, which `hfx generate`
// refuses to run (`hfx verify` reports it as a failed I/O signature check).
void check_declared_outputs(const Artifact& a, const ArtifactComponent& c);

// Executor options for running a component read from a file: the per-tensor budget from its contract
// (runtime::contract_tensor_budget) at `batch` rows of at most `length` positions.
runtime::ExecOptions artifact_exec_options(const ArtifactComponent& c, int64_t batch, int64_t length);

}  // namespace hfx::pipeline
