#include "runtime/executorch/et_runner.h"

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/platform/platform.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstring>

#include "core/error.h"

// ExecuTorch's platform log hook (a weak symbol in libexecutorch): its info lines (cpuinfo probing,
// thread pool size) would interleave with hfx's output; warnings and errors still reach stderr.
extern "C" void et_pal_emit_log_message(et_timestamp_t, et_pal_log_level_t level, const char* filename, const char*,
                                        size_t line, const char* message, size_t length) {
  if (level == kInfo || level == kDebug) return;
  std::fprintf(stderr, "executorch: %c %s:%zu] %.*s\n", char(level), filename, line, int(length), message);
}

namespace hfx::runtime {

namespace {

namespace et = executorch;
using et::extension::Module;

const char* error_name(et::runtime::Error e) {
  switch (e) {
    case et::runtime::Error::Ok: return "Ok";
    case et::runtime::Error::Internal: return "Internal";
    case et::runtime::Error::InvalidState: return "InvalidState";
    case et::runtime::Error::EndOfMethod: return "EndOfMethod";
    case et::runtime::Error::NotSupported: return "NotSupported";
    case et::runtime::Error::NotImplemented: return "NotImplemented";
    case et::runtime::Error::InvalidArgument: return "InvalidArgument (an input outside the program's shapes or bounds)";
    case et::runtime::Error::InvalidType: return "InvalidType";
    case et::runtime::Error::OperatorMissing: return "OperatorMissing (a kernel this runtime has not registered)";
    case et::runtime::Error::NotFound: return "NotFound";
    case et::runtime::Error::MemoryAllocationFailed: return "MemoryAllocationFailed";
    case et::runtime::Error::AccessFailed: return "AccessFailed";
    case et::runtime::Error::InvalidProgram: return "InvalidProgram";
    default: return "error";
  }
}

et::aten::ScalarType scalar_type(DType t) {
  switch (t) {
    case DType::I64: return et::aten::ScalarType::Long;
    case DType::I32: return et::aten::ScalarType::Int;
    case DType::F32: return et::aten::ScalarType::Float;
    case DType::Bool: return et::aten::ScalarType::Bool;
    default: bad_input("executorch: no input of dtype {}", dtype_name(t));
  }
}

class ExecuTorchRunner final : public StepRunner {
 public:
  ExecuTorchRunner(std::filesystem::path pte, std::vector<std::string> names, std::vector<std::string> outputs)
      : pte_(std::move(pte)), names_(std::move(names)), outputs_(std::move(outputs)) {
    load();
  }

  std::vector<std::string> input_names() const override { return names_; }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) override {
    std::vector<Tensor> held;
    std::vector<et::extension::TensorPtr> ptrs;
    for (const auto& name : names_) {
      auto it = inputs.find(name);
      if (it == inputs.end()) bad_input("{}: no tensor given for the program's input {}", pte_.string(), name);
      held.push_back(it->second);
    }
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == "cache_position" && held[i].numel() > 0 && held[i].dtype() == DType::I64 && held[i].as<int64_t>()[0] == 0 && used_)
        load();  // a new sequence: a fresh method, zeroed buffers
    check_bounds(held);
    for (auto& t : held) {
      std::vector<et::aten::SizesType> sizes(t.shape().begin(), t.shape().end());
      ptrs.push_back(et::extension::from_blob(t.data(), sizes, scalar_type(t.dtype())));
    }
    std::vector<et::runtime::EValue> args(ptrs.begin(), ptrs.end());
    used_ = true;
    auto result = module_->forward(args);
    if (!result.ok())
      fail(ErrorKind::Mismatch, "executorch {} failed on {}: forward returned {}", executorch_runtime_version(), pte_.string(),
           error_name(result.error()));
    if (result->size() != outputs_.size())
      fail(ErrorKind::Mismatch, "{}: forward returned {} values, expected {} ({})", pte_.string(), result->size(), outputs_.size(),
           fmt::join(outputs_, ", "));
    std::map<std::string, Tensor> named;
    for (size_t i = 0; i < outputs_.size(); ++i) {
      if (!(*result)[i].isTensor()) fail(ErrorKind::Mismatch, "{}: forward's {} is not a tensor", pte_.string(), outputs_[i]);
      const auto& out = (*result)[i].toTensor();
      if (out.scalar_type() != et::aten::ScalarType::Float)
        fail(ErrorKind::Mismatch, "{}: forward's {} is not f32", pte_.string(), outputs_[i]);
      std::vector<int64_t> shape(out.sizes().begin(), out.sizes().end());
      Tensor t(DType::F32, shape);
      std::memcpy(t.data(), out.const_data_ptr<float>(), t.nbytes());
      named.emplace(outputs_[i], std::move(t));
    }
    return named;
  }

 private:
  // A tensor past its planned capacity is refused by ExecuTorch (NotSupported, and a log line about
  // resizing a bounded tensor): said here in one line, naming the input and the program's bounds.
  void check_bounds(const std::vector<Tensor>& held) {
    const auto meta = module_->method_meta("forward");
    if (!meta.ok()) return;  // forward() reports it
    for (size_t i = 0; i < held.size() && i < meta->num_inputs(); ++i) {
      const auto t = meta->input_tensor_meta(i);
      if (!t.ok()) continue;
      const auto bound = t->sizes();
      const auto& shape = held[i].shape();
      bool past = shape.size() != bound.size();
      for (size_t d = 0; !past && d < shape.size(); ++d) past = shape[d] > bound[d];
      if (past)
        bad_input("{}: {} of shape [{}] is past the program's bounds [{}] (its planned shapes, from the export's --dim)", pte_.string(),
                  names_[i], fmt::join(shape, ", "), fmt::join(std::vector<int64_t>(bound.begin(), bound.end()), ", "));
    }
  }

  void load() {
    module_ = std::make_unique<Module>(pte_.string(), Module::LoadMode::Mmap);
    const auto e = module_->load_method("forward");
    if (e != et::runtime::Error::Ok)
      fail(ErrorKind::Mismatch, "executorch {} refused {}: {}", executorch_runtime_version(), pte_.string(), error_name(e));
    used_ = false;
  }

  std::filesystem::path pte_;
  std::vector<std::string> names_, outputs_;
  std::unique_ptr<Module> module_;
  bool used_ = false;
};

}  // namespace

std::unique_ptr<StepRunner> make_executorch_cpp_runner(const std::filesystem::path& pte, const std::vector<std::string>& input_names,
                                                       const std::vector<std::string>& output_names) {
  return std::make_unique<ExecuTorchRunner>(pte, input_names, output_names);
}

std::string executorch_runtime_version() { return HFX_EXECUTORCH_VERSION; }

}  // namespace hfx::runtime
