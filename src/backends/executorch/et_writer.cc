#include "backends/executorch/et_writer.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/pipelined_file.h"
#include "executorch/program_generated.h"

namespace fs = std::filesystem;
namespace etfb = executorch_flatbuffer;

namespace hfx::executorch_backend {

namespace {

constexpr size_t kHeaderOffset = 8;    // the extended header follows the root offset and the identifier
constexpr size_t kHeaderLength = 32;   // "eh00", its length, program size, segment base, segment size
constexpr int64_t kSegmentAlignment = 128;  // exir's default segment alignment
constexpr int64_t kConstantAlignment = 16;  // exir's tensor alignment
constexpr size_t kInFlightBytes = size_t(64) << 20;

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

flatbuffers::Offset<etfb::EValue> evalue(flatbuffers::FlatBufferBuilder& fb, const EtValue& v) {
  using K = EtValue::Kind;
  switch (v.kind) {
    case K::Null: return etfb::CreateEValue(fb, etfb::KernelTypes::Null, etfb::CreateNull(fb).Union());
    case K::Int: return etfb::CreateEValue(fb, etfb::KernelTypes::Int, etfb::CreateInt(fb, v.i).Union());
    case K::Bool: return etfb::CreateEValue(fb, etfb::KernelTypes::Bool, etfb::CreateBool(fb, v.b).Union());
    case K::Double: return etfb::CreateEValue(fb, etfb::KernelTypes::Double, etfb::CreateDouble(fb, v.d).Union());
    case K::String: return etfb::CreateEValue(fb, etfb::KernelTypes::String, etfb::CreateStringDirect(fb, v.s.c_str()).Union());
    case K::IntList: return etfb::CreateEValue(fb, etfb::KernelTypes::IntList, etfb::CreateIntListDirect(fb, &v.items).Union());
    case K::TensorList: {
      const std::vector<int32_t> items(v.items.begin(), v.items.end());
      return etfb::CreateEValue(fb, etfb::KernelTypes::TensorList, etfb::CreateTensorListDirect(fb, &items).Union());
    }
    case K::OptionalTensorList: {
      const std::vector<int32_t> items(v.items.begin(), v.items.end());
      return etfb::CreateEValue(fb, etfb::KernelTypes::OptionalTensorList, etfb::CreateOptionalTensorListDirect(fb, &items).Union());
    }
    case K::Tensor: {
      const EtTensor& t = v.tensor;
      const std::vector<int32_t> sizes(t.sizes.begin(), t.sizes.end());
      std::vector<uint8_t> dim_order(t.sizes.size());
      for (size_t i = 0; i < dim_order.size(); ++i) dim_order[i] = uint8_t(i);
      flatbuffers::Offset<etfb::AllocationDetails> alloc = 0;
      if (t.constant == 0 && t.offset >= 0)
        alloc = etfb::CreateAllocationDetails(fb, 1, uint32_t(uint64_t(t.offset) & 0xffffffffu), uint32_t(uint64_t(t.offset) >> 32));
      flatbuffers::Offset<etfb::ExtraTensorInfo> extra = 0;
      if (!t.fqn.empty()) extra = etfb::CreateExtraTensorInfoDirect(fb, 0, t.fqn.c_str());
      auto tensor = etfb::CreateTensorDirect(fb, etfb::ScalarType(t.scalar_type), 0, &sizes, &dim_order, false, t.constant, alloc, 0,
                                             t.dynamic ? etfb::TensorShapeDynamism::DYNAMIC_BOUND : etfb::TensorShapeDynamism::STATIC,
                                             extra);
      return etfb::CreateEValue(fb, etfb::KernelTypes::Tensor, tensor.Union());
    }
  }
  fail(ErrorKind::Internal, "executorch: an EValue of unknown kind");
}

flatbuffers::Offset<etfb::ExecutionPlan> plan(flatbuffers::FlatBufferBuilder& fb, const EtMethod& m) {
  std::vector<flatbuffers::Offset<etfb::EValue>> values;
  for (const auto& v : m.values) values.push_back(evalue(fb, v));
  std::vector<flatbuffers::Offset<etfb::Instruction>> instructions;
  for (const auto& c : m.calls) {
    const std::vector<int32_t> args(c.args.begin(), c.args.end());
    instructions.push_back(c.delegate ? etfb::CreateInstruction(fb, etfb::InstructionArguments::DelegateCall,
                                                                etfb::CreateDelegateCallDirect(fb, c.op, &args).Union())
                                      : etfb::CreateInstruction(fb, etfb::InstructionArguments::KernelCall,
                                                                etfb::CreateKernelCallDirect(fb, c.op, &args).Union()));
  }
  const std::vector<int32_t> none;
  std::vector<flatbuffers::Offset<etfb::Chain>> chains = {etfb::CreateChainDirect(fb, &none, &none, &instructions)};
  std::vector<flatbuffers::Offset<etfb::Operator>> operators;
  for (const auto& [name, overload] : m.operators) operators.push_back(etfb::CreateOperatorDirect(fb, name.c_str(), overload.c_str()));
  // `delegates` must be present even when empty: the runtime refuses a method without it. Delegate k's
  // payload is segment 1 + its blob index (segment 0 holds the constants).
  std::vector<flatbuffers::Offset<etfb::BackendDelegate>> delegates;
  const std::vector<flatbuffers::Offset<etfb::CompileSpec>> no_specs;
  for (size_t blob : m.delegates)
    delegates.push_back(etfb::CreateBackendDelegateDirect(
        fb, "XnnpackBackend", etfb::CreateBackendDelegateDataReference(fb, etfb::DataLocation::SEGMENT, uint32_t(1 + blob)), &no_specs));
  const std::vector<int64_t> buffer_sizes = {0, m.arena_bytes};
  const std::vector<int32_t> inputs(m.inputs.begin(), m.inputs.end()), outputs(m.outputs.begin(), m.outputs.end());
  return etfb::CreateExecutionPlanDirect(fb, m.name.c_str(), 0, &values, &inputs, &outputs, &chains, &operators, &delegates,
                                         &buffer_sizes);
}

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// One constant into the segment: the mapped bytes themselves, blocks of converted rows, or the
// materialised tensor, as the weight allows.
void write_constant(const ir::WeightRef& w, PipelinedFile& out) {
  if (auto raw = w.raw_bytes()) {
    out.write(*raw, [w] { w.release_source_pages(); });
    return;
  }
  if (w.streamable() && w.row_bytes() > 0) {
    const int64_t rows = w.rows();
    const size_t row = w.row_bytes();
    const int64_t step = std::max<int64_t>(1, int64_t((size_t(4) << 20) / row));
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const int64_t r1 = std::min(rows, r0 + step);
      PipelinedFile::Buffer b = out.buffer(size_t(r1 - r0) * row);
      w.write_rows(r0, r1, b.data.get(), row);
      out.write(std::move(b));
    }
    w.release_source_pages();
    return;
  }
  auto tensor = std::make_shared<const Tensor>(w.materialize());
  HFX_CHECK(tensor->nbytes() == w.nbytes(), "executorch: {} bytes for a constant of {}", tensor->nbytes(), w.nbytes());
  out.write({tensor->data(), tensor->nbytes()}, [tensor, w] { w.release_source_pages(); });
}

}  // namespace

EtWritten write_pte(const EtProgram& program, const fs::path& file, const std::function<void(int64_t, int64_t)>& on_constant_written) {
  // The constant segment's layout first: the flatbuffer records every offset.
  std::vector<uint64_t> offsets = {0};  // [0]: the reserved placeholder
  int64_t segment = 0;
  for (const auto& c : program.constants) {
    segment = align_up(segment, kConstantAlignment);
    offsets.push_back(uint64_t(segment));
    segment += int64_t(c.nbytes());
  }
  flatbuffers::FlatBufferBuilder fb(size_t(1) << 20);
  std::vector<flatbuffers::Offset<etfb::ExecutionPlan>> plans;
  for (const auto& m : program.methods) plans.push_back(plan(fb, m));
  // Segments: the constants, each delegate payload, each named weight; 128-byte aligned.
  std::vector<flatbuffers::Offset<etfb::DataSegment>> segments = {etfb::CreateDataSegment(fb, 0, uint64_t(segment))};
  std::vector<uint64_t> starts = {0};
  int64_t end = segment;
  auto add_segment = [&](int64_t size) {
    const int64_t at = align_up(end, kSegmentAlignment);
    segments.push_back(etfb::CreateDataSegment(fb, uint64_t(at), uint64_t(size)));
    starts.push_back(uint64_t(at));
    end = at + size;
  };
  for (const auto& blob : program.delegate_blobs) add_segment(int64_t(blob.size()));
  std::vector<flatbuffers::Offset<etfb::NamedData>> named;
  for (const auto& [key, w] : program.named_data) {
    named.push_back(etfb::CreateNamedDataDirect(fb, key.c_str(), uint32_t(segments.size())));
    add_segment(int64_t(w.nbytes()));
  }
  // Every list present, empty or not: the runtime takes a missing one for empty, exir's deserializer
  // (deserialize_pte_binary, which ExecuTorch's devtools read programs with) does not.
  const std::vector<flatbuffers::Offset<etfb::Buffer>> no_buffers;
  const std::vector<flatbuffers::Offset<etfb::BackendDelegateInlineData>> no_inline_delegates;
  const std::vector<flatbuffers::Offset<etfb::SubsegmentOffsets>> no_mutable_segments;
  auto root = etfb::CreateProgramDirect(fb, 0, &plans, &no_buffers, &no_inline_delegates, &segments,
                                        etfb::CreateSubsegmentOffsetsDirect(fb, 0, &offsets), &no_mutable_segments, &named);
  etfb::FinishProgramBuffer(fb, root);
  const uint8_t* data = fb.GetBufferPointer();
  const size_t fb_size = fb.GetSize();

  // [root offset + ET12][eh00 header][the rest of the flatbuffer], root offset moved by the header.
  const uint64_t program_size = fb_size + kHeaderLength;
  const uint64_t segment_base = uint64_t(align_up(int64_t(program_size), kSegmentAlignment));
  EtWritten out;
  out.file = file;
  PipelinedFile f(file, kInFlightBytes);
  PipelinedFile::Buffer head = f.buffer(program_size);
  uint8_t* h = head.data.get();
  std::memcpy(h, data, kHeaderOffset);
  uint32_t root_offset;
  std::memcpy(&root_offset, data, 4);
  put_u32(h, root_offset + uint32_t(kHeaderLength));
  std::memcpy(h + 8, "eh00", 4);
  put_u32(h + 12, uint32_t(kHeaderLength));
  put_u64(h + 16, program_size);
  put_u64(h + 24, segment_base);
  put_u64(h + 32, uint64_t(end));
  std::memcpy(h + kHeaderOffset + kHeaderLength, data + kHeaderOffset, fb_size - kHeaderOffset);
  f.write(std::move(head));
  for (size_t k = 0; k < program.constants.size(); ++k) {
    const auto& c = program.constants[k];
    f.pad_to(size_t(segment_base + offsets[k + 1]));
    write_constant(c, f);
    out.constant_bytes += int64_t(c.nbytes());
    out.source_bytes_read += int64_t(c.source_bytes());
    if (on_constant_written) on_constant_written(1, int64_t(c.nbytes()));
  }
  if (program.constants.empty()) f.pad_to(size_t(segment_base));
  size_t next = 1;
  for (const auto& blob : program.delegate_blobs) {
    f.pad_to(size_t(segment_base + starts[next++]));
    PipelinedFile::Buffer b = f.buffer(blob.size());
    std::memcpy(b.data.get(), blob.data(), blob.size());
    f.write(std::move(b));
  }
  for (const auto& [key, w] : program.named_data) {
    f.pad_to(size_t(segment_base + starts[next++]));
    write_constant(w, f);
    out.constant_bytes += int64_t(w.nbytes());
    out.source_bytes_read += int64_t(w.source_bytes());
    if (on_constant_written) on_constant_written(1, int64_t(w.nbytes()));
  }
  out.size = f.size();
  out.sha256 = f.finish();
  return out;
}

}  // namespace hfx::executorch_backend
