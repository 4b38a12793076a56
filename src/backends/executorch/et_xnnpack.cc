#include "backends/executorch/et_xnnpack.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "executorch/xnnpack_generated.h"

namespace xnn = fb_xnnpack;

namespace hfx::executorch_backend {

namespace {

constexpr uint32_t kInvalidValueId = std::numeric_limits<uint32_t>::max();  // XNN_INVALID_VALUE_ID
constexpr uint32_t kExternalInput = 1, kExternalOutput = 2;                  // XNN_VALUE_FLAG_*
constexpr size_t kHeaderPadded = 32;                                          // XH00 header, padded

std::vector<uint32_t> u32(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// A value: an f32/f16 tensor, or an int8 weight [N, K] with one scale per output row (channel_dim 0,
// zero point 0, as XNNPACK's qcint8 has it), the scales inline in the graph. `constant` is the value's
// 1-based index into the graph's constant_data (0: not a constant).
flatbuffers::Offset<xnn::XValue> value(flatbuffers::FlatBufferBuilder& fb, const XnnValue& v, uint32_t constant, uint32_t id) {
  const std::vector<uint32_t> dims = u32(v.dims);
  const uint32_t external = v.external >= 0 ? uint32_t(v.external) : kInvalidValueId;
  const uint32_t flags = v.external < 0 ? 0 : v.output ? kExternalOutput : kExternalInput;
  if (v.int8_scales.empty()) {
    const auto dt = v.f16 ? xnn::XNNDatatype::xnn_datatype_fp16 : xnn::XNNDatatype::xnn_datatype_fp32;
    auto t = xnn::CreateXNNTensorValueDirect(fb, dt, uint32_t(dims.size()), &dims, constant, external, flags, id);
    return xnn::CreateXValue(fb, xnn::XValueUnion::XNNTensorValue, t.Union());
  }
  auto t = xnn::CreateXNNTensorValueDirect(fb, xnn::XNNDatatype::xnn_datatype_qcint8, uint32_t(dims.size()), &dims, constant,
                                           external, flags, id);
  auto q = xnn::CreatePerChannelQuantDirect(fb, &v.int8_scales, 0, 0, uint32_t(v.int8_scales.size()));
  auto qv = xnn::CreateXNNQuantizedTensorValue(fb, t, xnn::XNNQuantParams::PerChannelQuant, q.Union());
  return xnn::CreateXValue(fb, xnn::XValueUnion::XNNQuantizedTensorValue, qv.Union());
}

flatbuffers::Offset<xnn::XNode> node(flatbuffers::FlatBufferBuilder& fb, const XnnNode& n) {
  using K = XnnKind;
  using U = xnn::XNodeUnion;
  auto in = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : kInvalidValueId; };
  auto unary = [&](U u) { return xnn::CreateXNode(fb, u, xnn::Create_XNNNode1x1(fb, in(0), n.output, n.flags).Union()); };
  auto binary = [&](U u) { return xnn::CreateXNode(fb, u, xnn::Create_XNNNode2x1(fb, in(0), in(1), n.output, n.flags).Union()); };
  switch (n.kind) {
    case K::FullyConnected:
      return xnn::CreateXNode(fb, U::XNNFullyConnected, xnn::CreateXNNFullyConnected(fb, in(0), in(1), in(2), n.output, n.flags).Union());
    case K::BatchMatrixMultiply: return binary(U::XNNBatchMatrixMultiply);
    case K::Add: return binary(U::XNNAdd);
    case K::Subtract: return binary(U::XNNSubtract);
    case K::Multiply: return binary(U::XNNMultiply);
    case K::Divide: return binary(U::XNNDiv);
    case K::Negate: return unary(U::XNNNegate);
    case K::Sigmoid: return unary(U::XNNSigmoid);
    case K::Tanh: return unary(U::XNNTanh);
    case K::Exp: return unary(U::XNNExp);
    case K::Log: return unary(U::XNNLog);
    case K::Sin: return unary(U::XNNSin);
    case K::Cos: return unary(U::XNNCos);
    case K::SquareRoot: return unary(U::XNNSquareRoot);
    case K::ReciprocalSquareRoot: return unary(U::XNNReciprocalSquareRoot);
    case K::Softmax: return unary(U::XNNSoftmax);
    case K::Convert: return unary(U::XNNConvert);
    case K::Copy: return unary(U::XNNCopy);
    case K::GlobalAvgPooling2d: return unary(U::XNNGlobalAvgPooling2d);
    case K::StaticTranspose: {
      const auto perm = u32(n.params);
      return xnn::CreateXNode(fb, U::XNNStaticTranspose,
                              xnn::CreateXNNStaticTransposeDirect(fb, uint32_t(perm.size()), &perm, in(0), n.output, n.flags).Union());
    }
    case K::StaticReshape: {
      const auto shape = u32(n.params);
      return xnn::CreateXNode(fb, U::XNNStaticReshape,
                              xnn::CreateXNNStaticReshapeDirect(fb, uint32_t(shape.size()), &shape, in(0), n.output, n.flags).Union());
    }
    case K::StaticSlice: {
      const size_t rank = n.params.size() / 2;
      const std::vector<uint32_t> offsets(n.params.begin(), n.params.begin() + ptrdiff_t(rank)),
          sizes(n.params.begin() + ptrdiff_t(rank), n.params.end());
      return xnn::CreateXNode(fb, U::XNNStaticSlice,
                              xnn::CreateXNNStaticSliceDirect(fb, uint32_t(rank), &offsets, &sizes, in(0), n.output, n.flags).Union());
    }
    case K::Concatenate: {
      static const U by_count[] = {U::NONE, U::NONE, U::XNNConcatenate2, U::XNNConcatenate3, U::XNNConcatenate4, U::XNNConcatenate5};
      HFX_CHECK(n.inputs.size() >= 2 && n.inputs.size() <= 5, "xnnpack: a concatenate of {} inputs", n.inputs.size());
      auto cat = xnn::Create_XNNCat(fb, uint32_t(n.params.at(0)), in(0), in(1), in(2), in(3), n.output, n.flags, in(4));
      return xnn::CreateXNode(fb, by_count[n.inputs.size()], cat.Union());
    }
  }
  HFX_CHECK(false, "xnnpack: a node kind with no serialization");
  return {};
}

void put_u32(std::string& s, size_t at, uint32_t v) { std::memcpy(s.data() + at, &v, 4); }

}  // namespace

const char* xnn_kind_name(XnnKind k) {
  static const char* names[] = {"XNNFullyConnected", "XNNBatchMatrixMultiply", "XNNAdd", "XNNSubtract", "XNNMultiply", "XNNDiv",
                                "XNNNegate", "XNNSigmoid", "XNNTanh", "XNNExp", "XNNLog", "XNNSin", "XNNCos", "XNNSquareRoot",
                                "XNNReciprocalSquareRoot", "XNNSoftmax", "XNNStaticTranspose", "XNNStaticReshape", "XNNStaticSlice",
                                "XNNConcatenate", "XNNConvert", "XNNCopy", "XNNGlobalAvgPooling2d"};
  return names[size_t(k)];
}

std::string xnnpack_payload(const XnnGraph& g) {
  flatbuffers::FlatBufferBuilder fb(4096);
  // constant_data[0] is reserved; the weights are named data of the program (offset: none inline).
  std::vector<flatbuffers::Offset<xnn::ConstantDataOffset>> constants = {xnn::CreateConstantDataOffset(fb, 0, 0)};
  std::vector<flatbuffers::Offset<xnn::XValue>> values;
  std::vector<uint32_t> inputs, outputs;
  uint32_t externs = 0;
  for (size_t id = 0; id < g.values.size(); ++id) {
    const XnnValue& v = g.values[id];
    uint32_t constant = 0;
    if (!v.named_key.empty()) {
      constant = uint32_t(constants.size());
      constants.push_back(xnn::CreateConstantDataOffsetDirect(fb, std::numeric_limits<uint64_t>::max(), 0, v.named_key.c_str()));
    }
    values.push_back(value(fb, v, constant, uint32_t(id)));
    if (v.external < 0) continue;
    ++externs;
    (v.output ? outputs : inputs).push_back(uint32_t(id));
  }
  std::vector<flatbuffers::Offset<xnn::XNode>> nodes;
  for (const auto& n : g.nodes) nodes.push_back(node(fb, n));
  auto graph = xnn::CreateXNNGraphDirect(fb, "0", &nodes, &values, externs, &inputs, &outputs, &constants);
  xnn::FinishXNNGraphBuffer(fb, graph);

  // [4 zero bytes]["XH00"][u16 header length 30][u32 flatbuffer offset][u32 flatbuffer size]
  // [u32 constant data offset][u64 constant data size], padded to 32; then the flatbuffer.
  std::string blob(kHeaderPadded, '\0');
  std::memcpy(blob.data() + 4, "XH00", 4);
  const uint16_t header_length = 30;
  std::memcpy(blob.data() + 8, &header_length, 2);
  put_u32(blob, 10, uint32_t(kHeaderPadded));
  put_u32(blob, 14, uint32_t(fb.GetSize()));
  put_u32(blob, 18, uint32_t(kHeaderPadded + fb.GetSize()));
  blob.append(reinterpret_cast<const char*>(fb.GetBufferPointer()), fb.GetSize());
  return blob;
}

}  // namespace hfx::executorch_backend
