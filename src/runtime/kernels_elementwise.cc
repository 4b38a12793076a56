// Elementwise kernels: arithmetic (Mod among them), comparisons and logic with numpy broadcasting, unary math, Where,
// Cast.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernels.h"

namespace hfx::runtime::detail {

namespace {

// out[i] = f(a[i], b[i]) with broadcasting. Tight loops for the common stride patterns.
template <typename TA, typename TB, typename TO, typename F>
Tensor binary_apply(const ir::Node& node, const Tensor& a, const Tensor& b, DType out_dtype, F f) {
  const auto shape = broadcast_shape(node, {a.shape(), b.shape()});
  Tensor out(out_dtype, shape);
  auto plan = make_plan<3>(shape, {contiguous_strides(shape), broadcast_strides(a.shape(), shape),
                                   broadcast_strides(b.shape(), shape)});
  const TA* pa = a.as<TA>();
  const TB* pb = b.as<TB>();
  TO* po = out.as<TO>();
  for_each_run(plan, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
    TO* z = po + off[0];
    const TA* x = pa + off[1];
    const TB* y = pb + off[2];
    if (st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
    } else if (st[1] == 1 && st[2] == 0) {
      const TB yv = *y;
      for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], yv);
    } else if (st[1] == 0 && st[2] == 1) {
      const TA xv = *x;
      for (int64_t i = 0; i < n; ++i) z[i] = f(xv, y[i]);
    } else {
      const int64_t sa = st[1], sb = st[2];
      for (int64_t i = 0; i < n; ++i) z[i] = f(x[i * sa], y[i * sb]);
    }
  });
  return out;
}

void same_dtypes(const ir::Node& node, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    bad_input("{}: input dtypes differ: {} vs {}", node.op, dtype_name(a.dtype()), dtype_name(b.dtype()));
}

[[noreturn]] void no_dtype(const ir::Node& node, DType t) {
  unsupported("reference executor: {} of {} is not supported", node.op, dtype_name(t));
}

enum class Arith { Add, Sub, Mul, Div };

template <Arith op>
std::vector<Tensor> arith(const ir::Node& node, const KernelInputs& in) {
  const Tensor& a = arg(node, in, 0);
  const Tensor& b = arg(node, in, 1);
  same_dtypes(node, a, b);
  if (a.dtype() == DType::F32) {
    return {binary_apply<float, float, float>(node, a, b, DType::F32, [](float x, float y) {
      if constexpr (op == Arith::Add) return x + y;
      if constexpr (op == Arith::Sub) return x - y;
      if constexpr (op == Arith::Mul) return x * y;
      if constexpr (op == Arith::Div) return x / y;
    })};
  }
  if (a.dtype() == DType::I64) {
    if constexpr (op == Arith::Div) {
      for (int64_t v : b.values<int64_t>())
        if (v == 0) bad_input("Div: integer division by zero");
    }
    return {binary_apply<int64_t, int64_t, int64_t>(node, a, b, DType::I64, [](int64_t x, int64_t y) {
      // Wrapping arithmetic (as ONNX runtimes do) without signed-overflow UB.
      if constexpr (op == Arith::Add) return int64_t(uint64_t(x) + uint64_t(y));
      if constexpr (op == Arith::Sub) return int64_t(uint64_t(x) - uint64_t(y));
      if constexpr (op == Arith::Mul) return int64_t(uint64_t(x) * uint64_t(y));
      if constexpr (op == Arith::Div) return (x == std::numeric_limits<int64_t>::min() && y == -1) ? x : x / y;
    })};
  }
  no_dtype(node, a.dtype());
}

std::vector<Tensor> pow_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& a = arg(node, in, 0);
  const Tensor& b = arg(node, in, 1);
  if (a.dtype() == DType::F32) {
    Tensor bf = b.dtype() == DType::F32 ? Tensor() : b.cast(DType::F32);
    const Tensor& e = b.dtype() == DType::F32 ? b : bf;
    return {binary_apply<float, float, float>(node, a, e, DType::F32, pow_f32)};
  }
  if (a.dtype() == DType::I64) {
    Tensor bd = b.cast(DType::F32);
    return {binary_apply<int64_t, float, int64_t>(node, a, bd, DType::I64, [](int64_t x, float y) {
      return int64_t(std::pow(double(x), double(y)));
    })};
  }
  no_dtype(node, a.dtype());
}

// Mod(a, b; fmod=0): integers only, the remainder taking the divisor's sign (Python's %, ONNX's fmod=0);
// fmod=1: C's fmod, the dividend's sign (the only form ONNX allows for floats).
std::vector<Tensor> mod_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& a = arg(node, in, 0);
  const Tensor& b = arg(node, in, 1);
  same_dtypes(node, a, b);
  const bool c_fmod = node.attr_int("fmod", 0) != 0;
  if (a.dtype() == DType::F32) {
    if (!c_fmod) bad_input("Mod: floats need fmod=1 (ONNX Mod)");
    return {binary_apply<float, float, float>(node, a, b, DType::F32, [](float x, float y) { return std::fmod(x, y); })};
  }
  if (a.dtype() == DType::I64) {
    // A zero divisor is refused where it meets an element (an empty step's Mod by its length 0 is not).
    return {binary_apply<int64_t, int64_t, int64_t>(node, a, b, DType::I64, [c_fmod](int64_t x, int64_t y) {
      if (y == 0) bad_input("Mod: integer division by zero");
      if (y == -1) return int64_t(0);  // (INT64_MIN % -1 overflows)
      const int64_t r = x % y;
      return !c_fmod && r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
    })};
  }
  no_dtype(node, a.dtype());
}

enum class Cmp { Eq, Lt, Le, Gt, Ge };

template <Cmp op, typename T>
Tensor compare_typed(const ir::Node& node, const Tensor& a, const Tensor& b) {
  return binary_apply<T, T, uint8_t>(node, a, b, DType::Bool, [](T x, T y) -> uint8_t {
    if constexpr (op == Cmp::Eq) return x == y;
    if constexpr (op == Cmp::Lt) return x < y;
    if constexpr (op == Cmp::Le) return x <= y;
    if constexpr (op == Cmp::Gt) return x > y;
    if constexpr (op == Cmp::Ge) return x >= y;
  });
}

template <Cmp op>
std::vector<Tensor> compare(const ir::Node& node, const KernelInputs& in) {
  const Tensor& a = arg(node, in, 0);
  const Tensor& b = arg(node, in, 1);
  same_dtypes(node, a, b);
  switch (a.dtype()) {
    case DType::F32: return {compare_typed<op, float>(node, a, b)};
    case DType::I64: return {compare_typed<op, int64_t>(node, a, b)};
    case DType::Bool: return {compare_typed<op, uint8_t>(node, a, b)};
    default: no_dtype(node, a.dtype());
  }
}

template <bool is_and>
std::vector<Tensor> logic(const ir::Node& node, const KernelInputs& in) {
  const Tensor& a = arg(node, in, 0);
  const Tensor& b = arg(node, in, 1);
  expect_dtype(node, a, DType::Bool, "input 0");
  expect_dtype(node, b, DType::Bool, "input 1");
  return {binary_apply<uint8_t, uint8_t, uint8_t>(node, a, b, DType::Bool, [](uint8_t x, uint8_t y) -> uint8_t {
    if constexpr (is_and) return (x && y) ? 1 : 0;
    else return (x || y) ? 1 : 0;
  })};
}

template <typename F>
std::vector<Tensor> unary_float(const ir::Node& node, const KernelInputs& in, F f) {
  const Tensor& x = arg(node, in, 0);
  expect_dtype(node, x, DType::F32, "input");
  Tensor out(DType::F32, x.shape());
  const float* p = x.as<float>();
  float* o = out.as<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = f(p[i]);
  return {std::move(out)};
}

#define HFX_UNARY(name, expr)                                                       \
  std::vector<Tensor> name(const ir::Node& node, const KernelInputs& in) {           \
    return unary_float(node, in, [](float v) -> float { return expr; });             \
  }
HFX_UNARY(sqrt_kernel, std::sqrt(v))
HFX_UNARY(reciprocal_kernel, 1.0f / v)
HFX_UNARY(exp_kernel, std::exp(v))
HFX_UNARY(log_kernel, std::log(v))
HFX_UNARY(sin_kernel, std::sin(v))
HFX_UNARY(cos_kernel, std::cos(v))
HFX_UNARY(tanh_kernel, std::tanh(v))
HFX_UNARY(erf_kernel, std::erf(v))
HFX_UNARY(sigmoid_kernel, 1.0f / (1.0f + std::exp(-v)))
#undef HFX_UNARY

std::vector<Tensor> neg_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  if (x.dtype() == DType::F32) return unary_float(node, in, [](float v) { return -v; });
  if (x.dtype() == DType::I64) {
    Tensor out(DType::I64, x.shape());
    const int64_t* p = x.as<int64_t>();
    int64_t* o = out.as<int64_t>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = int64_t(0ull - uint64_t(p[i]));
    return {std::move(out)};
  }
  no_dtype(node, x.dtype());
}

std::vector<Tensor> not_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  expect_dtype(node, x, DType::Bool, "input");
  Tensor out(DType::Bool, x.shape());
  const uint8_t* p = x.as<uint8_t>();
  uint8_t* o = out.as<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = p[i] ? 0 : 1;
  return {std::move(out)};
}

std::vector<Tensor> identity_kernel(const ir::Node& node, const KernelInputs& in) { return {arg(node, in, 0)}; }

template <typename T>
Tensor where_typed(const Tensor& c, const Tensor& x, const Tensor& y, const std::vector<int64_t>& shape) {
  Tensor out(x.dtype(), shape);
  auto plan = make_plan<4>(shape, {contiguous_strides(shape), broadcast_strides(c.shape(), shape),
                                   broadcast_strides(x.shape(), shape), broadcast_strides(y.shape(), shape)});
  const uint8_t* pc = c.as<uint8_t>();
  const T* px = x.as<T>();
  const T* py = y.as<T>();
  T* po = out.as<T>();
  for_each_run(plan, [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
    T* z = po + off[0];
    const uint8_t* cc = pc + off[1];
    const T* xx = px + off[2];
    const T* yy = py + off[3];
    const int64_t sc = st[1], sx = st[2], sy = st[3];
    if (sc == 1 && sx == 0 && sy == 0) {
      const T xv = *xx, yv = *yy;
      for (int64_t i = 0; i < n; ++i) z[i] = cc[i] ? xv : yv;
    } else {
      for (int64_t i = 0; i < n; ++i) z[i] = cc[i * sc] ? xx[i * sx] : yy[i * sy];
    }
  });
  return out;
}

std::vector<Tensor> where_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& c = arg(node, in, 0);
  const Tensor& x = arg(node, in, 1);
  const Tensor& y = arg(node, in, 2);
  expect_dtype(node, c, DType::Bool, "condition");
  same_dtypes(node, x, y);
  const auto shape = broadcast_shape(node, {c.shape(), x.shape(), y.shape()});
  switch (x.dtype()) {
    case DType::F32: return {where_typed<float>(c, x, y, shape)};
    case DType::I64: return {where_typed<int64_t>(c, x, y, shape)};
    case DType::Bool: return {where_typed<uint8_t>(c, x, y, shape)};
    default: no_dtype(node, x.dtype());
  }
}

// ONNX TensorProto.DataType codes, for graphs read back from files that kept the numeric form.
std::optional<DType> dtype_from_onnx_code(int64_t code) {
  switch (code) {
    case 1: return DType::F32;
    case 2: return DType::U8;
    case 3: return DType::I8;
    case 5: return DType::I16;
    case 6: return DType::I32;
    case 7: return DType::I64;
    case 9: return DType::Bool;
    case 10: return DType::F16;
    case 11: return DType::F64;
    case 16: return DType::BF16;
    default: return std::nullopt;
  }
}

int64_t float_to_int(float v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18f) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18f) return std::numeric_limits<int64_t>::min();
  return int64_t(v);  // truncates toward zero, as ONNX Cast does
}

// Wraps an int64 into the range of a narrower integer type, as a C cast does.
int64_t narrow_int(int64_t v, DType to) {
  switch (to) {
    case DType::I32: return int32_t(uint32_t(uint64_t(v)));
    case DType::I16: return int16_t(uint16_t(uint64_t(v)));
    case DType::I8: return int8_t(uint8_t(uint64_t(v)));
    case DType::U8: return uint8_t(uint64_t(v));
    default: return v;
  }
}

}  // namespace

std::optional<DType> cast_target(const ir::Node& node) {
  auto it = node.attrs.find("to");
  if (it == node.attrs.end()) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&it->second)) return dtype_from_name(*s);
  if (const auto* i = std::get_if<int64_t>(&it->second)) return dtype_from_onnx_code(*i);
  return std::nullopt;
}

namespace {

// Cast. Values stay in compute dtypes: a cast to f16 or bf16 rounds each value to that type (round to
// nearest even, as the 16-bit type would store it) and keeps it as f32; a cast to f64 is f32; casts to
// narrower integers wrap the value into that type's range and keep it as i64.
std::vector<Tensor> cast_kernel(const ir::Node& node, const KernelInputs& in) {
  const Tensor& x = arg(node, in, 0);
  const std::optional<DType> to = cast_target(node);
  if (!to) bad_input("Cast: missing or unknown `to` attribute");
  const DType target = *to;
  const DType out_dtype = compute_dtype(target);
  Tensor out(out_dtype, x.shape());
  const int64_t n = x.numel();
  if (out_dtype == DType::F32) {
    float* o = out.as<float>();
    if (x.dtype() == DType::F32) std::memcpy(o, x.data(), x.nbytes());
    else if (x.dtype() == DType::I64) for (int64_t i = 0; i < n; ++i) o[i] = float(x.as<int64_t>()[i]);
    else if (x.dtype() == DType::Bool) for (int64_t i = 0; i < n; ++i) o[i] = x.as<uint8_t>()[i] ? 1.0f : 0.0f;
    else no_dtype(node, x.dtype());
    if (target == DType::F16)
      for (int64_t i = 0; i < n; ++i) o[i] = f16_to_f32(f32_to_f16(o[i]));
    else if (target == DType::BF16)
      for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(f32_to_bf16(o[i]));
  } else if (out_dtype == DType::I64) {
    int64_t* o = out.as<int64_t>();
    if (x.dtype() == DType::F32) for (int64_t i = 0; i < n; ++i) o[i] = float_to_int(x.as<float>()[i]);
    else if (x.dtype() == DType::I64) std::memcpy(o, x.data(), x.nbytes());
    else if (x.dtype() == DType::Bool) for (int64_t i = 0; i < n; ++i) o[i] = x.as<uint8_t>()[i] ? 1 : 0;
    else no_dtype(node, x.dtype());
    if (target != DType::I64)
      for (int64_t i = 0; i < n; ++i) o[i] = narrow_int(o[i], target);
  } else {
    uint8_t* o = out.as<uint8_t>();
    if (x.dtype() == DType::F32) for (int64_t i = 0; i < n; ++i) o[i] = x.as<float>()[i] != 0.0f ? 1 : 0;
    else if (x.dtype() == DType::I64) for (int64_t i = 0; i < n; ++i) o[i] = x.as<int64_t>()[i] != 0 ? 1 : 0;
    else if (x.dtype() == DType::Bool) std::memcpy(o, x.data(), x.nbytes());
    else no_dtype(node, x.dtype());
  }
  return {std::move(out)};
}

}  // namespace

void register_elementwise_kernels(KernelTable& t) {
  t["Add"] = arith<Arith::Add>;
  t["Sub"] = arith<Arith::Sub>;
  t["Mul"] = arith<Arith::Mul>;
  t["Div"] = arith<Arith::Div>;
  t["Pow"] = pow_kernel;
  t["Mod"] = mod_kernel;
  t["Equal"] = compare<Cmp::Eq>;
  t["Less"] = compare<Cmp::Lt>;
  t["LessOrEqual"] = compare<Cmp::Le>;
  t["Greater"] = compare<Cmp::Gt>;
  t["GreaterOrEqual"] = compare<Cmp::Ge>;
  t["And"] = logic<true>;
  t["Or"] = logic<false>;
  t["Neg"] = neg_kernel;
  t["Sqrt"] = sqrt_kernel;
  t["Reciprocal"] = reciprocal_kernel;
  t["Exp"] = exp_kernel;
  t["Log"] = log_kernel;
  t["Sin"] = sin_kernel;
  t["Cos"] = cos_kernel;
  t["Tanh"] = tanh_kernel;
  t["Erf"] = erf_kernel;
  t["Sigmoid"] = sigmoid_kernel;
  t["Not"] = not_kernel;
  t["Identity"] = identity_kernel;
  t["Where"] = where_kernel;
  t["Cast"] = cast_kernel;
}

}  // namespace hfx::runtime::detail
