#include "backends/openvino/ov_runner.h"

#include <fmt/format.h>

#include <openvino/openvino.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/safe_path.h"
#include "runtime/tested_runtimes.h"

namespace hfx::runtime {

namespace {

ov::element::Type ov_type(DType t) {
  switch (t) {
    case DType::F32: return ov::element::f32;
    case DType::I64: return ov::element::i64;
    case DType::I32: return ov::element::i32;
    case DType::Bool: return ov::element::boolean;  // a merged decoder's use_cache_branch (one byte each, as hfx's)
    default: unsupported("openvino runner: {} inputs", dtype_name(t));
  }
}

DType hfx_type(const ov::element::Type& t, const std::string& name) {
  if (t == ov::element::f32) return DType::F32;
  if (t == ov::element::i64) return DType::I64;
  if (t == ov::element::i32) return DType::I32;
  unsupported("openvino runner: output {} is {}", name, t.to_string());
}

// f32 throughout: compute, KV cache, and no dynamic quantization (by default the CPU plugin rounds the
// activations of FullyConnected layers with compressed u4/i4/u8/i8 weights to int8 in groups).
ov::AnyMap f32_config() {
  return ov::AnyMap{ov::hint::inference_precision(ov::element::f32), ov::hint::kv_cache_precision(ov::element::f32),
                    ov::hint::dynamic_quantization_group_size(0)};
}

[[noreturn]] void compile_failed(const std::filesystem::path& xml, const ov::Exception& e) {
  std::string msg = e.what();
  if (auto nl = msg.rfind('\n', msg.size() > 1 ? msg.size() - 2 : 0); nl != std::string::npos) msg = msg.substr(nl + 1);
  fail(ErrorKind::Io, "{}: OpenVINO cannot compile it: {}", xml.string(), msg);
}

// OpenVINO opens `xml` and the .bin beside it by path, with plain reads: refuse first what would
// read outside the IR's folder through a symlink, or block on a FIFO (the export is someone else's;
// the component file has been checked inside the export already, its .bin is found by name here).
// A missing .bin is left to OpenVINO, which says so.
const std::filesystem::path& checked_ir(const std::filesystem::path& xml) {
  const std::filesystem::path dir = xml.has_parent_path() ? xml.parent_path() : std::filesystem::path(".");
  check_file_inside(dir, xml, "OpenVINO model");
  std::filesystem::path bin = xml;
  bin.replace_extension(".bin");
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(bin, ec))) check_file_inside(dir, bin, "OpenVINO weights");
  return xml;
}

std::string port_sig(const ov::Output<const ov::Node>& port) {
  std::vector<std::string> dims;
  const auto& shape = port.get_partial_shape();
  // hfx's dtype names: OpenVINO spells bool "boolean".
  const auto& t = port.get_element_type();
  const std::string type = t == ov::element::boolean ? "bool" : t.to_string();
  if (shape.rank().is_dynamic()) return type + "[...]";
  for (const auto& d : shape) dims.push_back(d.is_static() ? std::to_string(d.get_length()) : "?");
  return fmt::format("{}[{}]", type, fmt::join(dims, ","));
}

class OpenVinoRunner final : public StepRunner {
 public:
  OpenVinoRunner(const std::filesystem::path& xml, const std::string& device) : xml_(xml) {
    warn_if_untested("OpenVINO", ov::get_openvino_version().buildNumber, kTestedOpenVino);
    try {
      ov::Core core;
      compiled_ = core.compile_model(checked_ir(xml).string(), device, f32_config());
      request_ = compiled_.create_infer_request();
    } catch (const ov::Exception& e) {
      compile_failed(xml, e);
    }
    for (const auto& in : compiled_.inputs()) {
      const std::string name = in.get_any_name();
      if (name == "beam_idx")
        stateful_ = true;
      else
        inputs_.push_back(name);
    }
  }

  std::vector<std::string> input_names() const override { return inputs_; }

  const Tensor& given(const std::map<std::string, Tensor>& feed, const std::string& name) const {
    auto it = feed.find(name);
    if (it == feed.end()) bad_input("{}: input {} was not given", xml_.string(), name);
    return it->second;
  }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feed) override {
    std::vector<int32_t> beams;
    if (stateful_) {
      // A stateful decoder starts over when its mask covers only this step's tokens (an
      // encoder-decoder's, which has no mask of its own tokens, when its loop says: start_over).
      const Tensor& ids = given(feed, "input_ids");
      const bool masked = std::find(inputs_.begin(), inputs_.end(), "attention_mask") != inputs_.end();
      if (masked && given(feed, "attention_mask").shape().at(1) == ids.shape().at(1)) request_.reset_state();
      beams.resize(size_t(ids.shape().at(0)));
      std::iota(beams.begin(), beams.end(), 0);
    }
    try {
      for (const auto& name : inputs_) {
        const Tensor& t = given(feed, name);
        ov::Shape shape(t.shape().begin(), t.shape().end());
        request_.set_tensor(name, ov::Tensor(ov_type(t.dtype()), shape, const_cast<uint8_t*>(t.data())));
      }
      if (stateful_) request_.set_tensor("beam_idx", ov::Tensor(ov::element::i32, ov::Shape{beams.size()}, beams.data()));
      request_.infer();
    } catch (const ov::Exception& e) {
      fail(ErrorKind::Internal, "{}: OpenVINO inference failed: {}", xml_.string(), std::string(e.what()).substr(0, 400));
    }
    std::map<std::string, Tensor> out;
    for (const auto& o : compiled_.outputs()) {
      const std::string name = o.get_any_name();
      ov::Tensor t = request_.get_tensor(o);
      const ov::Shape dims = t.get_shape();  // by value: iterate one copy
      std::vector<int64_t> shape(dims.begin(), dims.end());
      Tensor r(hfx_type(t.get_element_type(), name), shape);
      std::memcpy(r.data(), t.data(), r.nbytes());
      out.emplace(name, std::move(r));
    }
    return out;
  }

  void start_over() override {
    if (stateful_) request_.reset_state();
  }

  // The stateful IR's variables (named by tasks::openvino_variable_id), as the next run reads them.
  std::map<std::string, Tensor> held_state() override {
    std::map<std::string, Tensor> held;
    if (!stateful_) return held;
    for (auto& state : request_.query_state()) {
      const ov::Tensor t = state.get_state();
      if (t.get_element_type() != ov::element::f32) continue;  // hfx's states are f32
      const ov::Shape dims = t.get_shape();
      Tensor r(DType::F32, std::vector<int64_t>(dims.begin(), dims.end()));
      std::memcpy(r.data(), t.data(), r.nbytes());
      held.emplace(state.get_name(), std::move(r));
    }
    return held;
  }

 private:
  std::filesystem::path xml_;
  ov::CompiledModel compiled_;
  ov::InferRequest request_;
  std::vector<std::string> inputs_;
  bool stateful_ = false;
};

}  // namespace

std::unique_ptr<StepRunner> make_openvino_runner(const std::filesystem::path& xml, const std::string& device) {
  return std::make_unique<OpenVinoRunner>(xml, device);
}

OpenVinoSignature openvino_signature(const std::filesystem::path& xml) {
  OpenVinoSignature sig;
  try {
    std::shared_ptr<const ov::Model> model = ov::Core().read_model(checked_ir(xml).string());
    for (const auto& in : model->inputs()) sig.inputs.emplace_back(in.get_any_name(), port_sig(in));
    for (const auto& out : model->outputs()) sig.outputs.emplace_back(out.get_any_name(), port_sig(out));
  } catch (const ov::Exception& e) {
    compile_failed(xml, e);
  }
  return sig;
}

std::map<std::string, std::map<std::string, int>> openvino_exec_summary(const std::filesystem::path& xml) {
  std::map<std::string, std::map<std::string, int>> summary;
  try {
    ov::Core core;
    auto compiled = core.compile_model(checked_ir(xml).string(), "CPU", f32_config());
    for (const auto& node : compiled.get_runtime_model()->get_ops()) {
      const auto& rt = node->get_rt_info();
      auto text = [&](const char* key) {
        auto it = rt.find(key);
        return it == rt.end() ? std::string("?") : it->second.as<std::string>();
      };
      ++summary[text("layerType")][text("runtimePrecision")];
    }
  } catch (const ov::Exception& e) {
    compile_failed(xml, e);
  }
  return summary;
}

}  // namespace hfx::runtime
