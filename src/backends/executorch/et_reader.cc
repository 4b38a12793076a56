#include "backends/executorch/et_reader.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "executorch/program_generated.h"
#include "executorch/xnnpack_generated.h"

namespace fs = std::filesystem;
namespace etfb = executorch_flatbuffer;

namespace hfx::executorch_backend {

namespace {

constexpr size_t kHeaderOffset = 8;
constexpr size_t kHeaderLength = 32;
constexpr uint64_t kMaxProgramBytes = uint64_t(256) << 20;

const char* dtype_of(etfb::ScalarType t) {
  switch (int(t)) {
    case 0: return "u8";
    case 1: return "i8";
    case 2: return "i16";
    case 3: return "i32";
    case 4: return "i64";
    case 5: return "f16";
    case 6: return "f32";
    case 7: return "f64";
    case 11: return "bool";
    case 15: return "bf16";
    default: return "?";
  }
}

// The node names of one XNNPACK payload (XH00 header, then an XNNGraph), counted into `nodes`;
// BadInput when the payload is not one.
void count_xnnpack_nodes(const fs::path& file, const std::string& blob, std::map<std::string, int>& nodes) {
  uint32_t at = 0, size = 0;
  if (blob.size() >= 18 && std::memcmp(blob.data() + 4, "XH00", 4) == 0) {
    std::memcpy(&at, blob.data() + 10, 4);
    std::memcpy(&size, blob.data() + 14, 4);
  }
  if (size == 0 || uint64_t(at) + size > blob.size()) bad_input("{}: an XNNPACK delegate payload without its XH00 header", file.string());
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(blob.data() + at), size);
  if (!fb_xnnpack::VerifyXNNGraphBuffer(v)) bad_input("{}: an XNNPACK payload that does not verify against its schema", file.string());
  const auto* graph = fb_xnnpack::GetXNNGraph(blob.data() + at);
  if (graph->xnodes())
    for (const auto* n : *graph->xnodes()) nodes[fb_xnnpack::EnumNameXNodeUnion(n->xnode_union_type())]++;
}

// The bytes of segment `index` of a .pte.
std::string read_segment(const fs::path& file, const etfb::Program* program, uint32_t index) {
  if (!program->segments() || index >= program->segments()->size()) bad_input("{}: a delegate names segment {} of none such", file.string(), index);
  std::ifstream in(file, std::ios::binary);
  uint8_t head[kHeaderOffset + kHeaderLength];
  in.read(reinterpret_cast<char*>(head), sizeof head);
  uint64_t segment_base;
  std::memcpy(&segment_base, head + 24, 8);
  const auto* s = program->segments()->Get(index);
  const uintmax_t end = fs::file_size(file);
  if (segment_base + s->offset() + s->size() > end || s->size() > kMaxProgramBytes)
    bad_input("{}: segment {} lies past the end of the file", file.string(), index);
  std::string bytes(s->size(), '\0');
  in.seekg(std::streamoff(segment_base + s->offset()));
  if (!in.read(bytes.data(), std::streamsize(bytes.size()))) bad_input("{}: cannot read segment {}", file.string(), index);
  return bytes;
}

}  // namespace

std::string read_pte_program(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) bad_input("{}: cannot open", file.string());
  uint8_t head[kHeaderOffset + kHeaderLength];
  if (!in.read(reinterpret_cast<char*>(head), sizeof head)) bad_input("{}: shorter than an ExecuTorch program header", file.string());
  if (std::memcmp(head + 4, "ET12", 4) != 0) bad_input("{}: not an ExecuTorch program (no ET12 identifier)", file.string());
  if (std::memcmp(head + 8, "eh00", 4) != 0) bad_input("{}: no eh00 extended header", file.string());
  uint64_t program_size, segment_base, segment_size;
  std::memcpy(&program_size, head + 16, 8);
  std::memcpy(&segment_base, head + 24, 8);
  std::memcpy(&segment_size, head + 32, 8);
  const uintmax_t size = fs::file_size(file);
  if (program_size > size || segment_base < program_size || segment_base + segment_size > size)
    bad_input("{}: header sizes (program {}, segments {} at {}) do not fit the file's {} bytes", file.string(), program_size,
              segment_size, segment_base, size);
  if (program_size > kMaxProgramBytes) bad_input("{}: a program of {} bytes is past hfx's 256 MiB limit", file.string(), program_size);
  std::string bytes(program_size, '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), std::streamsize(program_size))) bad_input("{}: cannot read its program", file.string());
  // The flatbuffer as flatc wrote it: the header removed and the root offset put back.
  std::string fb = bytes.substr(0, kHeaderOffset) + bytes.substr(kHeaderOffset + kHeaderLength);
  uint32_t root_offset;
  std::memcpy(&root_offset, fb.data(), 4);
  if (root_offset < kHeaderLength) bad_input("{}: root offset {} inside the header", file.string(), root_offset);
  root_offset -= uint32_t(kHeaderLength);
  std::memcpy(fb.data(), &root_offset, 4);
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(fb.data()), fb.size());
  if (!etfb::VerifyProgramBuffer(v)) bad_input("{}: the program flatbuffer does not verify against program.fbs", file.string());
  return fb;
}


EtMethodInfo read_pte_forward(const fs::path& file) {
  const std::string fb = read_pte_program(file);
  const auto* program = etfb::GetProgram(fb.data());
  EtMethodInfo info;
  const etfb::ExecutionPlan* forward = nullptr;
  if (program->execution_plan())
    for (const auto* plan : *program->execution_plan()) {
      const std::string name = plan->name() ? plan->name()->str() : "";
      info.methods.push_back(name);
      if (name == "forward") forward = plan;
    }
  if (!forward) bad_input("{}: the program has no forward method (methods: {})", file.string(), fmt::join(info.methods, ", "));
  const auto* values = forward->values();
  auto port = [&](int32_t index, const char* what) {
    if (!values || index < 0 || uint32_t(index) >= values->size() || values->Get(uint32_t(index))->val_type() != etfb::KernelTypes::Tensor)
      bad_input("{}: forward {} {} is not a tensor value", file.string(), what, index);
    const auto* t = values->Get(uint32_t(index))->val_as_Tensor();
    EtPort p;
    p.dtype = dtype_of(t->scalar_type());
    if (t->sizes())
      for (auto s : *t->sizes()) p.sizes.push_back(s);
    p.dynamic = t->shape_dynamism() != etfb::TensorShapeDynamism::STATIC;
    return p;
  };
  if (forward->inputs())
    for (auto i : *forward->inputs()) info.inputs.push_back(port(i, "input"));
  if (forward->outputs())
    for (auto i : *forward->outputs()) info.outputs.push_back(port(i, "output"));
  std::vector<std::string> ops;
  if (forward->operators())
    for (const auto* op : *forward->operators()) {
      const std::string name = op->name() ? op->name()->str() : "?", overload = op->overload() ? op->overload()->str() : "";
      ops.push_back(overload.empty() ? name : name + "." + overload);
    }
  if (forward->chains())
    for (const auto* chain : *forward->chains()) {
      if (!chain->instructions()) continue;
      for (const auto* ins : *chain->instructions()) {
        if (const auto* call = ins->instr_args_as_KernelCall()) {
            if (call->op_index() < 0 || size_t(call->op_index()) >= ops.size())
              bad_input("{}: a kernel call names operator {} of {}", file.string(), call->op_index(), ops.size());
            info.kernels[ops[size_t(call->op_index())]]++;
          } else if (const auto* d = ins->instr_args_as_DelegateCall()) {
            const auto* delegates = forward->delegates();
            if (!delegates || d->delegate_index() < 0 || size_t(d->delegate_index()) >= delegates->size())
              bad_input("{}: a delegate call names delegate {} of {}", file.string(), d->delegate_index(), delegates ? delegates->size() : 0);
            const auto* delegate = delegates->Get(flatbuffers::uoffset_t(d->delegate_index()));
            const std::string id = delegate->id() ? delegate->id()->str() : "?";
            info.kernels[id + " (delegate)"]++;
            const auto* processed = delegate->processed();
            if (id != "XnnpackBackend" || !processed) continue;
            if (processed->location() == etfb::DataLocation::SEGMENT) {
              count_xnnpack_nodes(file, read_segment(file, program, processed->index()), info.xnnpack_nodes);
            } else if (program->backend_delegate_data() && processed->index() < program->backend_delegate_data()->size()) {
              const auto* data = program->backend_delegate_data()->Get(processed->index())->data();
              if (data) count_xnnpack_nodes(file, std::string(reinterpret_cast<const char*>(data->data()), data->size()), info.xnnpack_nodes);
            }
          }
      }
    }
  return info;
}

}  // namespace hfx::executorch_backend
