// libglmnorm_torch: the CPU kernels of the torch.ops.glmnorm.* operators.
//
// The schemas are defined in Python (python/glmnorm/torch.py, one place, with
// the fake kernels and the autograd registration); this library registers
// only the CPU implementations (TORCH_LIBRARY_IMPL), so a call from Python
// goes through PyTorch's C++ dispatcher straight to the glmnorm kernel with
// no Python frame in between. Measured on a 1 x 5120 bf16 call: 2.5-4.2 us
// over the kernel alone, against ~11.6 us for the same op as a Python
// torch.library.custom_op (docs/PYTHON.md).
//
// Errors: glmnorm::Error becomes c10::ValueError (Python ValueError), or
// c10::TypeError (TypeError) when the message is about a dtype.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "glmnorm/glmnorm.h"

namespace glmnorm_torch {
namespace {

[[noreturn]] void Rethrow(const glmnorm::Error& e) {
  const std::string msg = e.what();
  if (msg.find("dtype") != std::string::npos) {
    TORCH_CHECK_TYPE(false, msg);
  }
  TORCH_CHECK_VALUE(false, msg);
}

glmnorm::DType Code(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": glmnorm runs on the CPU; got a tensor on ",
                    t.device());
  switch (t.scalar_type()) {
    case at::kFloat: return glmnorm::DType::kF32;
    case at::kBFloat16: return glmnorm::DType::kBF16;
    case at::kHalf: return glmnorm::DType::kF16;
    case at::kChar: return glmnorm::DType::kI8;
    case at::kFloat8_e4m3fn: return glmnorm::DType::kF8E4M3;
    case at::kLong: return glmnorm::DType::kI64;
    default:
      TORCH_CHECK_TYPE(false, name, ": unsupported dtype ", t.scalar_type(),
                       " (glmnorm takes float32, bfloat16, float16; int8 / float8_e4m3fn "
                       "outputs; int64 positions)");
  }
}

template <typename Ptr>
glmnorm::BasicTensorView<Ptr> View(const at::Tensor& t, const char* name) {
  glmnorm::BasicTensorView<Ptr> v;
  v.dtype = Code(t, name);
  TORCH_CHECK_VALUE(t.dim() <= glmnorm::kMaxRank, name, ": rank must be at most 4, got ",
                    t.dim());
  v.data = t.data_ptr();
  v.rank = static_cast<int>(t.dim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = t.size(i);
    v.stride[i] = t.stride(i);
  }
  return v;
}

// [..., W] as 2-D [rows, W] when the leading dims form rows of one stride.
template <typename Ptr>
glmnorm::BasicTensorView<Ptr> Rows2d(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() >= 1, name, ": needs at least one dim");
  glmnorm::BasicTensorView<Ptr> v;
  v.dtype = Code(t, name);
  v.data = t.data_ptr();
  v.rank = 2;
  const int64_t d = t.dim();
  int64_t rows = 1;
  int64_t row_stride = t.size(d - 1);
  int64_t prev_stride = -1;
  int64_t prev_size = 1;
  for (int64_t i = d - 2; i >= 0; --i) {
    rows *= t.size(i);
    if (t.size(i) == 1) continue;
    if (prev_stride < 0) {
      row_stride = t.stride(i);
    } else {
      TORCH_CHECK_VALUE(t.stride(i) == prev_stride * prev_size, name, ": the leading dims of ",
                        t.sizes(), " with strides ", t.strides(),
                        " do not form rows of one stride");
    }
    prev_stride = t.stride(i);
    prev_size = t.size(i);
  }
  v.shape[0] = rows;
  v.shape[1] = t.size(d - 1);
  v.stride[0] = row_stride;
  v.stride[1] = d >= 1 ? t.stride(d - 1) : 1;
  return v;
}

glmnorm::Rounding ParseRounding(c10::string_view rounding) {
  if (rounding == "cast-then-scale") return glmnorm::Rounding::kCastThenScale;
  if (rounding == "single") return glmnorm::Rounding::kSingle;
  TORCH_CHECK_VALUE(false, "rounding must be 'cast-then-scale' or 'single', got '",
                    std::string(rounding.data(), rounding.size()), "'");
}

glmnorm::NormOptions Options(double eps, c10::string_view rounding, double weight_offset) {
  glmnorm::NormOptions o;
  o.eps = static_cast<float>(eps);
  o.rounding = ParseRounding(rounding);
  o.weight_offset = static_cast<float>(weight_offset);
  return o;
}

glmnorm::AddNormOptions AddOptions(double eps, c10::string_view rounding, double weight_offset,
                                   bool normalize_rounded_sum) {
  glmnorm::AddNormOptions o;
  static_cast<glmnorm::NormOptions&>(o) = Options(eps, rounding, weight_offset);
  o.normalize_rounded_sum = normalize_rounded_sum;
  return o;
}

at::ScalarType NormDtype(at::ScalarType w, at::ScalarType x, c10::string_view rounding) {
  if (rounding == "single" || w == x) return x;
  return at::kFloat;
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps,
                   c10::string_view rounding, double weight_offset) {
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(
                                          NormDtype(weight.scalar_type(), x.scalar_type(),
                                                    rounding)));
  try {
    glmnorm::RmsNorm(View<const void*>(x, "x"), View<const void*>(weight, "weight"),
                     View<void*>(y, "out"), Options(eps, rounding, weight_offset));
  } catch (const glmnorm::Error& e) {
    Rethrow(e);
  }
  return y;
}

at::Tensor AddRmsNorm(const at::Tensor& residual, const at::Tensor& delta,
                      const at::Tensor& weight, double eps, c10::string_view rounding,
                      double weight_offset, bool normalize_rounded_sum) {
  const at::ScalarType out_dtype =
      rounding == "single" ? delta.scalar_type()
                           : NormDtype(weight.scalar_type(), residual.scalar_type(), rounding);
  at::Tensor y = at::empty(residual.sizes(), residual.options().dtype(out_dtype));
  try {
    glmnorm::AddRmsNorm(View<void*>(residual, "residual"), View<const void*>(delta, "delta"),
                        View<const void*>(weight, "weight"), View<void*>(y, "out"),
                        AddOptions(eps, rounding, weight_offset, normalize_rounded_sum));
  } catch (const glmnorm::Error& e) {
    Rethrow(e);
  }
  return y;
}

void QkCall(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
            int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads, int64_t head_dim,
            double eps, c10::string_view rounding, double weight_offset, int64_t rotary_dim,
            const std::optional<at::Tensor>& cos, const std::optional<at::Tensor>& sin,
            const std::optional<at::Tensor>& positions) {
  glmnorm::QkHeads heads;
  heads.num_q_heads = static_cast<int>(num_q_heads);
  heads.num_k_heads = static_cast<int>(num_k_heads);
  heads.num_v_heads = static_cast<int>(num_v_heads);
  heads.head_dim = static_cast<int>(head_dim);
  glmnorm::Rope rope;
  rope.rotary_dim = static_cast<int>(rotary_dim);
  if (rotary_dim != 0) {
    TORCH_CHECK_VALUE(cos.has_value() && sin.has_value(),
                      "qk_norm: rotary_dim > 0 needs cos and sin tables");
    rope.cos = View<const void*>(*cos, "cos");
    rope.sin = View<const void*>(*sin, "sin");
    if (positions.has_value()) rope.positions = View<const void*>(*positions, "positions");
  }
  try {
    auto out = Rows2d<void*>(qkv, "qkv");
    glmnorm::QkNorm(glmnorm::AsConst(out), out, heads, View<const void*>(q_weight, "q_weight"),
                    View<const void*>(k_weight, "k_weight"),
                    Options(eps, rounding, weight_offset), rope);
  } catch (const glmnorm::Error& e) {
    Rethrow(e);
  }
}

void QkNormInPlace(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
                   int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads,
                   int64_t head_dim, double eps, c10::string_view rounding,
                   double weight_offset, int64_t rotary_dim,
                   const std::optional<at::Tensor>& cos, const std::optional<at::Tensor>& sin,
                   const std::optional<at::Tensor>& positions) {
  QkCall(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim, eps,
         rounding, weight_offset, rotary_dim, cos, sin, positions);
}

at::Tensor QkNorm(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
                  int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads,
                  int64_t head_dim, double eps, c10::string_view rounding, double weight_offset,
                  int64_t rotary_dim, const std::optional<at::Tensor>& cos,
                  const std::optional<at::Tensor>& sin,
                  const std::optional<at::Tensor>& positions) {
  at::Tensor out = at::empty(qkv.sizes(), qkv.options());
  out.copy_(qkv);
  QkCall(out, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim, eps,
         rounding, weight_offset, rotary_dim, cos, sin, positions);
  return out;
}

glmnorm::DType QuantDtype(at::ScalarType dtype) {
  TORCH_CHECK_TYPE(dtype == at::kChar || dtype == at::kFloat8_e4m3fn,
                   "dtype must be torch.int8 or torch.float8_e4m3fn, got ", dtype);
  return dtype == at::kChar ? glmnorm::DType::kI8 : glmnorm::DType::kF8E4M3;
}

std::tuple<at::Tensor, at::Tensor> QuantBuffers(const at::Tensor& like, at::ScalarType dtype,
                                                std::optional<double> scale) {
  QuantDtype(dtype);
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < like.dim(); ++i) rows *= like.size(i);
  at::Tensor q = at::empty(like.sizes(), like.options().dtype(dtype));
  at::Tensor scales =
      at::empty({scale.has_value() ? int64_t{1} : rows}, like.options().dtype(at::kFloat));
  return {q, scales};
}

glmnorm::QuantOptions Quant(std::optional<double> scale, const at::Tensor& scales) {
  glmnorm::QuantOptions q;
  if (scale.has_value()) {
    q.scaling = glmnorm::QuantScaling::kStatic;
    q.scale = static_cast<float>(*scale);
  } else {
    q.scaling = glmnorm::QuantScaling::kDynamicPerToken;
    q.scales = View<void*>(scales, "scales");
  }
  return q;
}

std::tuple<at::Tensor, at::Tensor> RmsNormQuant(const at::Tensor& x, const at::Tensor& weight,
                                                at::ScalarType dtype,
                                                std::optional<double> scale, double eps,
                                                c10::string_view rounding,
                                                double weight_offset) {
  auto [q, scales] = QuantBuffers(x, dtype, scale);
  try {
    glmnorm::RmsNormQuant(View<const void*>(x, "x"), View<const void*>(weight, "weight"),
                          View<void*>(q, "out"), Quant(scale, scales),
                          Options(eps, rounding, weight_offset));
  } catch (const glmnorm::Error& e) {
    Rethrow(e);
  }
  if (scale.has_value()) scales.fill_(*scale);
  return {q, scales};
}

std::tuple<at::Tensor, at::Tensor> AddRmsNormQuant(
    const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
    at::ScalarType dtype, std::optional<double> scale, double eps, c10::string_view rounding,
    double weight_offset, bool normalize_rounded_sum) {
  auto [q, scales] = QuantBuffers(residual, dtype, scale);
  try {
    glmnorm::AddRmsNormQuant(View<void*>(residual, "residual"),
                             View<const void*>(delta, "delta"),
                             View<const void*>(weight, "weight"), View<void*>(q, "out"),
                             Quant(scale, scales),
                             AddOptions(eps, rounding, weight_offset, normalize_rounded_sum));
  } catch (const glmnorm::Error& e) {
    Rethrow(e);
  }
  if (scale.has_value()) scales.fill_(*scale);
  return {q, scales};
}

// The Autograd kernel of every op, until the backward kernels exist: refuses
// (RuntimeError, at the call) when grad mode is on and an input requires
// grad, instead of PyTorch's default for ops without autograd (a warning and
// silently no gradient); otherwise passes the call on below autograd. In C++
// so that calls outside inference_mode pay no Python frame (a Python autograd
// registration cost ~5 us a call). The backward issue replaces this.
void RefuseGrad(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                torch::jit::Stack* stack) {
  if (c10::GradMode::is_enabled()) {
    const std::string& qualified = op.schema().name();  // "glmnorm::rms_norm"
    const std::string name = qualified.substr(qualified.find("::") + 2);
    const size_t n = op.schema().arguments().size();
    for (size_t i = stack->size() - n; i < stack->size(); ++i) {
      const c10::IValue& v = (*stack)[i];
      TORCH_CHECK(!(v.isTensor() && v.toTensor().requires_grad()),
                  "glmnorm: the backward of torch.ops.glmnorm.", name,
                  " is not implemented yet (forward only; the backward kernels come with the "
                  "backward issue). Run under torch.no_grad() / torch.inference_mode(), or "
                  "detach the inputs.");
    }
  }
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

}  // namespace
}  // namespace glmnorm_torch

// This library links its own copy of the glmnorm kernels and so has its own
// thread pool: glmnorm.set_num_threads sets both (through ctypes, from
// glmnorm/torch.py), so the pool size is one setting for the user.
extern "C" {
__attribute__((visibility("default"))) int GlmnormTorchSetNumThreads(int n) {
  try {
    glmnorm::SetNumThreads(n);
    return 0;
  } catch (const glmnorm::Error&) {
    return 1;
  }
}
__attribute__((visibility("default"))) int GlmnormTorchNumThreads() {
  return glmnorm::NumThreads();
}
}  // extern "C"

TORCH_LIBRARY_IMPL(glmnorm, CPU, m) {
  m.impl("rms_norm", &glmnorm_torch::RmsNorm);
  m.impl("add_rms_norm", &glmnorm_torch::AddRmsNorm);
  m.impl("qk_norm_", &glmnorm_torch::QkNormInPlace);
  m.impl("qk_norm", &glmnorm_torch::QkNorm);
  m.impl("rms_norm_quant", &glmnorm_torch::RmsNormQuant);
  m.impl("add_rms_norm_quant", &glmnorm_torch::AddRmsNormQuant);
}

TORCH_LIBRARY_IMPL(glmnorm, Autograd, m) {
  for (const char* name : {"rms_norm", "add_rms_norm", "qk_norm_", "qk_norm", "rms_norm_quant",
                           "add_rms_norm_quant"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&glmnorm_torch::RefuseGrad>());
  }
}
