#include "pipeline/inspect.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "core/progress.h"
#include "passes/pass.h"
#include "pipeline/backend.h"
#include "pipeline/export.h"

namespace fs = std::filesystem;

namespace hfx::pipeline {

namespace {

// A hybrid's or an encoder-decoder's state, layer by layer, for the preflight: what one row holds (a
// key/value layer's per cached position, a cross-attention layer's per source position). Empty for a
// model whose state is a plain key/value cache on every layer (its size is the geometry the features
// line gives), so a decoder's inspect reads as before.
struct StateRow {
  int64_t layer = 0;
  std::string kind, ports;
  int64_t bytes = 0;
  bool per_position = false;  // per cached position, or per source position (`per_source`)
  bool per_source = false;
};
std::vector<StateRow> state_rows(const std::vector<tasks::StatePort>& ports) {
  bool hybrid = false;
  for (const auto& p : ports)
    hybrid = hybrid || p.spec.update == tasks::StateUpdate::Replace || p.spec.update == tasks::StateUpdate::Keep;
  std::vector<StateRow> rows;
  if (!hybrid) return rows;
  for (const auto& p : ports) {
    int64_t bytes = int64_t(dtype_size(p.spec.dtype));
    for (int64_t d : tasks::state_dims(p.spec, 1, 1)) bytes *= d;
    const bool cross = p.spec.kind == tasks::StateKind::CrossAttentionValue;
    const bool value_of_key = (p.spec.kind == tasks::StateKind::SelfAttentionValue || cross) && !rows.empty() &&
                              rows.back().layer == p.spec.layer;
    if (value_of_key) {  // a layer's key and value on one row
      rows.back().kind = cross ? "cross-attention key + value" : "self-attention key + value";
      rows.back().ports += " + value";
      rows.back().bytes += bytes;
      continue;
    }
    rows.push_back({p.spec.layer, std::string(tasks::state_kind_name(p.spec.kind)), p.past, bytes,
                    p.spec.update != tasks::StateUpdate::Replace, p.spec.update == tasks::StateUpdate::Keep});
  }
  return rows;
}

}  // namespace

std::string inspect_report(const fs::path& model_dir, bool as_json, const InspectOptions& options) {
  const Backend& backend = find_backend(options.format);
  Recipe recipe;
  recipe.formats = {backend.info().name};
  recipe.options = options.options;
  tasks::validate(options.task);
  LoadedModel m = load_model(model_dir, task_options(options.task, options.options, recipe.formats));
  const auto& s = m.summary();
  int64_t params = 0;
  std::map<std::string, int64_t> dtypes;
  for (const auto& [name, t] : m.checkpoint->tensors()) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    params += n;
    dtypes[std::string(dtype_name(t.dtype))] += n;
  }
  // The preflight of the format shown, else of the first that models one (ONNX's f32 export).
  std::optional<Preflight> pre = backend.preflight(m);
  std::string pre_format = backend.info().name;
  for (const Backend* b : all_backends())
    if (!pre && (pre = b->preflight(m))) pre_format = b->info().name;
  HFX_CHECK(pre, "no format models a preflight");
  const Preflight& p = *pre;
  // The contract of the component as this format writes it (the ort profile drops position_ids).
  const Backend::Plan plan = backend.plan(m.components.at(0), m, recipe, true);
  const auto& inputs = plan.inputs;
  const auto& outputs = plan.outputs;
  const std::string written_as = backend.info().name + (plan.layout.empty() ? "" : ", " + plan.layout);
  // The state of the first component that carries one (an encoder-decoder's encoder carries none).
  const tasks::Component* stateful = &m.components.at(0);
  for (const auto& c : m.components)
    if (stateful->state.empty() && !c.state.empty()) stateful = &c;

  if (as_json) {
    nlohmann::ordered_json j;
    j["model_type"] = s.model_type;
    j["hf_class"] = s.hf_class;
    j["parameters"] = params;
    j["dtypes"] = dtypes;
    for (const auto& [k, v] : s.features) j["features"][k] = v;
    auto io = [](const std::vector<tasks::IoSpec>& specs) {
      auto arr = nlohmann::ordered_json::array();
      for (const auto& x : specs) {
        std::vector<std::string> dims;
        for (const auto& d : x.shape) dims.push_back(d.str());
        arr.push_back({{"name", x.name}, {"dtype", dtype_name(x.dtype)}, {"shape", dims}});
      }
      return arr;
    };
    j["contract_of"] = {{"format", backend.info().name}, {"layout", plan.layout}, {"notes", plan.notes}};
    j["inputs"] = io(inputs);
    j["outputs"] = io(outputs);
    if (m.components.size() > 1) {  // inputs/outputs above are the first component's
      j["components"] = nlohmann::ordered_json::array();
      for (const auto& c : m.components) {
        const Backend::Plan cp = backend.plan(c, m, recipe, true);
        if (!cp.written) continue;
        j["components"].push_back({{"role", c.role}, {"inputs", io(cp.inputs)}, {"outputs", io(cp.outputs)}});
      }
    }
    if (const auto rows = state_rows(stateful->state); !rows.empty()) {
      auto arr = nlohmann::ordered_json::array();
      for (const auto& r : rows)
        arr.push_back({{"layer", r.layer}, {"kind", r.kind}, {"ports", r.ports}, {"bytes_per_row", r.bytes},
                       {"per_position", r.per_position}, {"per_source_position", r.per_source}});
      j["state_per_layer"] = arr;
    }
    j["preflight"] = {{"disk_bytes", p.disk_bytes},
                      {"peak_memory_bytes", p.peak_memory_bytes},
                      {"peak_memory_no_verify_bytes", p.peak_memory_no_verify_bytes},
                      {"largest_tensor", p.largest_tensor},
                      {"largest_tensor_bytes", p.largest_tensor_bytes}};
    return j.dump(2) + "\n";
  }

  std::string out;
  out += fmt::format("model        {} ({})\n", s.model_type, s.hf_class);
  out += fmt::format("layers       {}   hidden {}   vocab {}\n", s.num_layers, s.hidden_size, s.vocab_size);
  out += fmt::format("parameters   {} ({:.1f} M)\n", params, double(params) / 1e6);
  std::vector<std::string> dt;
  for (const auto& [k, v] : dtypes) dt.push_back(fmt::format("{} {}", k, v));
  out += fmt::format("dtypes       {}\n", fmt::join(dt, ", "));
  for (const auto& [k, v] : s.features) out += fmt::format("{:<12} {}\n", k, v);
  out += fmt::format("\nI/O contract of the export ({}; {}):\n", written_as, m.task->contract_summary());
  for (const auto& note : plan.notes) out += fmt::format("  note: {}\n", note);
  auto line = [&](const char* dir, const tasks::IoSpec& x) {
    std::vector<std::string> dims;
    for (const auto& d : x.shape) dims.push_back(d.str());
    out += fmt::format("  {} {:<28} {:<4} [{}]\n", dir, x.name, dtype_name(x.dtype), fmt::join(dims, ", "));
  };
  auto ports = [&](const std::vector<tasks::IoSpec>& ins, const std::vector<tasks::IoSpec>& outs) {
    const size_t shown = 7;  // inputs: ids, mask, positions (when read), and the first layers' cache
    for (size_t i = 0; i < ins.size(); ++i) {
      if (i == shown && ins.size() > shown + 1) {
        out += fmt::format("     ... {} more cache inputs\n", ins.size() - shown - 1);
        i = ins.size() - 1;
      }
      line("in ", ins[i]);
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      if (i == 5 && outs.size() > 6) {
        out += fmt::format("     ... {} more cache outputs\n", outs.size() - 6);
        i = outs.size() - 1;
      }
      line("out", outs[i]);
    }
  };
  if (m.components.size() == 1) ports(inputs, outputs);
  else
    for (size_t k = 0; k < m.components.size(); ++k) {
      const Backend::Plan cp = k == 0 ? plan : backend.plan(m.components[k], m, recipe, true);
      out += fmt::format(" component {}{}{}\n", m.components[k].role, cp.layout.empty() ? "" : " (" + cp.layout + ")",
                         cp.written ? ":" : "");
      if (!cp.written) continue;
      if (k > 0)
        for (const auto& note : cp.notes) out += fmt::format("  note: {}\n", note);
      ports(cp.inputs, cp.outputs);
    }
  if (m.task->generative()) out += "  total_sequence_length = past_sequence_length + sequence_length\n";
  else {  // the relations the components' contracts declare (an encoder-decoder's decoder length)
    std::set<std::string> said;
    for (const auto& c : m.components)
      for (const auto& r : c.graph.symbols().relations())
        if (said.insert(r.sum).second) out += fmt::format("  {} = {} + {}\n", r.sum, r.a, r.b);
  }
  if (const auto rows = state_rows(stateful->state); !rows.empty()) {
    out += "\nstate per layer (one row; a growing cache per cached position):\n";
    for (const auto& r : rows)
      out += fmt::format("  layer {:<3} {:<34} {:<32} {}{}\n", r.layer, r.kind, r.ports, human_bytes(r.bytes),
                         r.per_source ? " per source position" : r.per_position ? " per position" : "");
  }
  out += fmt::format(
      "\npreflight ({}, f32): disk {}, peak memory {} (with the built-in verification; {} with --no-verify), largest "
      "tensor {}: {}\n",
      pre_format, human_bytes(p.disk_bytes), human_bytes(p.peak_memory_bytes), human_bytes(p.peak_memory_no_verify_bytes),
      p.largest_tensor, human_bytes(p.largest_tensor_bytes));
  return out;
}

}  // namespace hfx::pipeline
