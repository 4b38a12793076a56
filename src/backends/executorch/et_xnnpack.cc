#include "backends/executorch/et_xnnpack.h"

#include <cstring>
#include <limits>

#include "executorch/xnnpack_generated.h"

namespace xnn = fb_xnnpack;

namespace hfx::executorch_backend {

namespace {

constexpr uint32_t kInvalidValueId = std::numeric_limits<uint32_t>::max();  // XNN_INVALID_VALUE_ID
constexpr uint32_t kExternalInput = 1, kExternalOutput = 2;                  // XNN_VALUE_FLAG_*
constexpr size_t kHeaderPadded = 32;                                          // XH00 header, padded

flatbuffers::Offset<xnn::XValue> tensor(flatbuffers::FlatBufferBuilder& fb, xnn::XNNDatatype dtype, const std::vector<int64_t>& sizes,
                                        uint32_t constant, uint32_t external, uint32_t flags, uint32_t id) {
  const std::vector<uint32_t> dims(sizes.begin(), sizes.end());
  auto t = xnn::CreateXNNTensorValueDirect(fb, dtype, uint32_t(dims.size()), &dims, constant, external, flags, id);
  return xnn::CreateXValue(fb, xnn::XValueUnion::XNNTensorValue, t.Union());
}

// An int8 weight [N, K] with one scale per output row (channel_dim 0; zero point 0, as XNNPACK's qcint8
// has it), the scales inline in the graph.
flatbuffers::Offset<xnn::XValue> qc8_weight(flatbuffers::FlatBufferBuilder& fb, const std::vector<int64_t>& sizes, const std::vector<float>& scales,
                                            uint32_t constant, uint32_t id) {
  const std::vector<uint32_t> dims(sizes.begin(), sizes.end());
  auto t = xnn::CreateXNNTensorValueDirect(fb, xnn::XNNDatatype::xnn_datatype_qcint8, uint32_t(dims.size()), &dims, constant,
                                           kInvalidValueId, 0, id);
  auto q = xnn::CreatePerChannelQuantDirect(fb, &scales, 0, 0, uint32_t(scales.size()));
  auto v = xnn::CreateXNNQuantizedTensorValue(fb, t, xnn::XNNQuantParams::PerChannelQuant, q.Union());
  return xnn::CreateXValue(fb, xnn::XValueUnion::XNNQuantizedTensorValue, v.Union());
}

void put_u32(std::string& s, size_t at, uint32_t v) { std::memcpy(s.data() + at, &v, 4); }

}  // namespace

std::string xnnpack_linear_payload(const XnnLinear& l) {
  flatbuffers::FlatBufferBuilder fb(4096);
  const bool bias = !l.bias_key.empty();
  // Values: 0 input (external 0), 1 weight, [2 bias], last the output (external 1).
  const uint32_t out_id = bias ? 3 : 2;
  const auto dt = l.f16 ? xnn::XNNDatatype::xnn_datatype_fp16 : xnn::XNNDatatype::xnn_datatype_fp32;
  std::vector<flatbuffers::Offset<xnn::XValue>> values = {
      tensor(fb, dt, l.input_sizes, 0, 0, kExternalInput, 0),
      l.int8_scales.empty() ? tensor(fb, dt, {l.out_features, l.in_features}, 1, kInvalidValueId, 0, 1)
                            : qc8_weight(fb, {l.out_features, l.in_features}, l.int8_scales, 1, 1),
  };
  if (bias) values.push_back(tensor(fb, dt, {l.out_features}, 2, kInvalidValueId, 0, 2));
  values.push_back(tensor(fb, dt, l.output_sizes, 0, 1, kExternalOutput, out_id));
  auto fc = xnn::CreateXNNFullyConnected(fb, 0, 1, bias ? 2 : kInvalidValueId, out_id, 0);
  std::vector<flatbuffers::Offset<xnn::XNode>> nodes = {xnn::CreateXNode(fb, xnn::XNodeUnion::XNNFullyConnected, fc.Union(), 0)};
  // constant_data[0] is reserved; the weights are named data of the program (offset: none inline).
  std::vector<flatbuffers::Offset<xnn::ConstantDataOffset>> constants = {xnn::CreateConstantDataOffset(fb, 0, 0)};
  constants.push_back(xnn::CreateConstantDataOffsetDirect(fb, std::numeric_limits<uint64_t>::max(), 0, l.weight_key.c_str()));
  if (bias) constants.push_back(xnn::CreateConstantDataOffsetDirect(fb, std::numeric_limits<uint64_t>::max(), 0, l.bias_key.c_str()));
  const std::vector<uint32_t> inputs = {0}, outputs = {out_id};
  auto graph = xnn::CreateXNNGraphDirect(fb, "0", &nodes, &values, 2, &inputs, &outputs, &constants);
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
