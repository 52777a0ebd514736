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
// Autograd (C++, so that a call outside inference_mode pays no Python frame):
// rms_norm and the functional qk_norm (without RoPE) have a backward, through
// the ops glmnorm::rms_norm_backward / glmnorm::qk_norm_backward called via
// the dispatcher (so torch.compile / AOTAutograd trace them with their fake
// kernels). The other ops refuse inputs that require grad (RefuseGrad).
//
// Errors: glmnorm::Error becomes c10::ValueError (Python ValueError), or
// c10::TypeError (TypeError) for glmnorm::DTypeError; messages name the op and
// the argument as Python spells them. Every rule (output dtype, rounding
// names, checks) is the library's: this file translates arguments.
//
// One native library per process: this library and the nanobind module both
// link libglmnorm.so (the package's copy of the kernels, one thread pool).
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/core/GradMode.h>
#include <c10/util/accumulate.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "glmnorm/output_cache.h"
#include "messages.h"

namespace glmnorm_torch {
namespace {

// glmnorm::Error -> Python ValueError / TypeError by the error's kind,
// reworded for the op the user called (messages.h: its name and its
// arguments' names; `renames` for this op's own).
[[noreturn]] void Rethrow(const char* op, const glmnorm::Error& e,
                          std::initializer_list<glmnorm_python::Rename> renames = {}) {
  const std::string what =
      glmnorm_python::PythonMessage(std::string("glmnorm.") + op, e.what(), renames);
  if (dynamic_cast<const glmnorm::DTypeError*>(&e) != nullptr) {
    TORCH_CHECK_TYPE(false, what);
  }
  TORCH_CHECK_VALUE(false, what);
}

// torch's dtypes and the library's, one table for both directions.
constexpr std::pair<at::ScalarType, glmnorm::DType> kDTypes[] = {
    {at::kFloat, glmnorm::DType::kF32},         {at::kBFloat16, glmnorm::DType::kBF16},
    {at::kHalf, glmnorm::DType::kF16},          {at::kChar, glmnorm::DType::kI8},
    {at::kFloat8_e4m3fn, glmnorm::DType::kF8E4M3}, {at::kLong, glmnorm::DType::kI64}};

glmnorm::DType Code(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), "glmnorm.", op, ": ", name,
                    ": glmnorm runs on the CPU; got a tensor on ", t.device());
  for (const auto& [torch_dtype, dtype] : kDTypes) {
    if (t.scalar_type() == torch_dtype) return dtype;
  }
  // torch's Python name (torch.float64), as glmnorm's package functions say, not c10's (Double).
  TORCH_CHECK_TYPE(false, "glmnorm.", op, ": ", name, ": unsupported dtype torch.",
                   c10::getDtypeNames(t.scalar_type()).first,
                   " (glmnorm takes float32, bfloat16, float16; int8 / float8_e4m3fn outputs; "
                   "int64 positions)");
}

at::ScalarType Torch(glmnorm::DType d) {
  for (const auto& [torch_dtype, dtype] : kDTypes) {
    if (d == dtype) return torch_dtype;
  }
  return at::kFloat;
}

// The view of argument `name` of op `op`. Rank is the library's to check
// (1..4); a rank it cannot even hold is reported here, under the same name.
template <typename Ptr>
glmnorm::BasicTensorView<Ptr> View(const char* op, const at::Tensor& t, const char* name) {
  glmnorm::BasicTensorView<Ptr> v;
  v.dtype = Code(op, t, name);
  TORCH_CHECK_VALUE(t.dim() >= 1 && t.dim() <= glmnorm::kMaxRank, "glmnorm.", op, ": ", name,
                    ".rank must be 1..", glmnorm::kMaxRank, ", got ", t.dim(), " (shape ",
                    t.sizes(), ")");
  v.data = t.data_ptr();
  v.rank = static_cast<int>(t.dim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = t.size(i);
    v.stride[i] = t.stride(i);
  }
  return v;
}

// A tensor the op writes in place: bumps its version counter first (so that
// autograd refuses a backward through its old value, as after x.add_()), and
// this refuses an inference tensor outside inference mode, as PyTorch's own
// in-place ops do. Called after the arguments are translated and before the
// kernel: a refused call writes nothing (a call the library then refuses has
// bumped the counter: harmless, no data changed).
void MarkWritten(const at::Tensor& t) { torch::autograd::impl::bump_version(t); }

// A new output: of kOutputCacheMinBytes or more from the library's output
// cache (glmnorm/output_cache.h: a freed output's memory serves the next of
// its size, already mapped, so steady-state calls pay no page faults;
// docs/PYTHON.md, "Fresh outputs"), smaller ones from PyTorch's allocator.
class CachedOutputs final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    glmnorm::OutputBlock block;
    try {
      block = glmnorm::AcquireOutputBlock(n);
    } catch (const glmnorm::Error& e) {  // its setting (GLMNORM_TORCH_OUTPUT_CACHE_MB)
      TORCH_CHECK_VALUE(false, "glmnorm: ", e.what());
    }
    return {block.data, block.owner, &glmnorm::ReleaseOutputBlock, c10::Device(c10::kCPU)};
  }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

at::Tensor NewOutput(at::IntArrayRef sizes, const at::TensorOptions& options) {
  static CachedOutputs* const cached = new CachedOutputs;  // never destroyed: outputs outlive exit
  if (c10::multiply_integers(sizes) * options.dtype().itemsize() < glmnorm::kOutputCacheMinBytes) {
    // empty_cpu directly: at::empty would pass through the dispatcher twice
    // (BackendSelect, then CPU) to reach it.
    return at::detail::empty_cpu(sizes, c10::typeMetaToScalarType(options.dtype()));
  }
  return at::detail::empty_generic(sizes, cached, c10::DispatchKeySet(c10::DispatchKey::CPU),
                                   c10::typeMetaToScalarType(options.dtype()), std::nullopt);
}

// The schema's double, str and int64 scalars become the library's options by
// its rules (glmnorm::NormOptionsFrom, QkHeadsFrom: refused, not narrowed).
glmnorm::NormOptions Options(double eps, c10::string_view rounding, double weight_offset) {
  return glmnorm::NormOptionsFrom(eps, std::string_view(rounding.data(), rounding.size()),
                                  weight_offset);
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps,
                   c10::string_view rounding, double weight_offset) {
  constexpr const char* kOp = "rms_norm";
  try {
    const auto o = Options(eps, rounding, weight_offset);
    const auto xv = View<const void*>(kOp, x, "x");
    const auto wv = View<const void*>(kOp, weight, "weight");
    at::Tensor y = NewOutput(
        x.sizes(), x.options().dtype(Torch(glmnorm::RmsNormOutputDType(xv.dtype, wv.dtype,
                                                                        o.rounding))));
    glmnorm::RmsNorm(xv, wv, View<void*>(kOp, y, "out"), o);
    return y;
  } catch (const glmnorm::Error& e) {
    Rethrow(kOp, e);
  }
}

at::Tensor AddRmsNorm(const at::Tensor& residual, const at::Tensor& delta,
                      const at::Tensor& weight, double eps, c10::string_view rounding,
                      double weight_offset, bool normalize_rounded_sum) {
  constexpr const char* kOp = "add_rms_norm";
  try {
    const glmnorm::AddNormOptions o{Options(eps, rounding, weight_offset), normalize_rounded_sum};
    const auto rv = View<void*>(kOp, residual, "residual");
    const auto dv = View<const void*>(kOp, delta, "delta");
    const auto wv = View<const void*>(kOp, weight, "weight");
    at::Tensor y = NewOutput(residual.sizes(),
                             residual.options().dtype(Torch(glmnorm::AddRmsNormOutputDType(
                                 rv.dtype, dv.dtype, wv.dtype, o.rounding))));
    const auto yv = View<void*>(kOp, y, "out");
    MarkWritten(residual);
    glmnorm::AddRmsNorm(rv, dv, wv, yv, o);
    return y;
  } catch (const glmnorm::Error& e) {
    Rethrow(kOp, e);
  }
}

// The Rope argument of the QK ops: an absent table is an empty view; the
// library checks the tables against rotary_dim.
glmnorm::Rope RopeOf(const char* op, int64_t rotary_dim, const std::optional<at::Tensor>& cos,
                     const std::optional<at::Tensor>& sin,
                     const std::optional<at::Tensor>& positions) {
  const auto table = [&](const std::optional<at::Tensor>& t, const char* name) {
    return t.has_value() ? View<const void*>(op, *t, name) : glmnorm::ConstTensorView{};
  };
  return {glmnorm::Int32Argument("rotary_dim", rotary_dim), table(cos, "cos"), table(sin, "sin"),
          table(positions, "positions")};
}

// v's columns of a fused QKV tensor from `from` into `to` (converted to its
// dtype): the functional ops' pass-through. Nothing when both are one tensor.
void CopyV(const at::Tensor& from, const at::Tensor& to, const glmnorm::QkHeads& h) {
  if (from.is_same(to) || h.num_v_heads == 0) return;
  const int64_t begin = (int64_t{h.num_q_heads} + h.num_k_heads) * h.head_dim;
  const int64_t cols = int64_t{h.num_v_heads} * h.head_dim;
  to.narrow(-1, begin, cols).copy_(from.narrow(-1, begin, cols));
}

// QkNorm of `in` into `out` (the same tensor for the in-place op). The
// library checks the user's tensors as given (dtype, shape, strides), so the
// functional op refuses what the in-place op and the package refuse, and
// nothing is converted or broadcast on the way; v's columns are then copied
// (QkNorm leaves them untouched).
void QkCall(const char* op, const at::Tensor& in, const at::Tensor& out, bool written_in_place,
            const at::Tensor& q_weight, const at::Tensor& k_weight, int64_t num_q_heads,
            int64_t num_k_heads, int64_t num_v_heads, int64_t head_dim, double eps,
            c10::string_view rounding, double weight_offset, int64_t rotary_dim,
            const std::optional<at::Tensor>& cos, const std::optional<at::Tensor>& sin,
            const std::optional<at::Tensor>& positions) {
  glmnorm::QkHeads heads;
  try {
    heads = glmnorm::QkHeadsFrom(num_q_heads, num_k_heads, num_v_heads, head_dim);
    const glmnorm::Rope rope = RopeOf(op, rotary_dim, cos, sin, positions);
    const auto in_view = View<const void*>(op, in, "qkv");
    const auto out_view = View<void*>(op, out, "qkv");
    const auto qw = View<const void*>(op, q_weight, "q_weight");
    const auto kw = View<const void*>(op, k_weight, "k_weight");
    const auto o = Options(eps, rounding, weight_offset);
    if (written_in_place) MarkWritten(out);
    glmnorm::QkNorm(in_view, out_view, heads, qw, kw, o, rope);
  } catch (const glmnorm::Error& e) {
    // Both views are the user's qkv (in place), or qkv and its new output.
    Rethrow(op, e, {{"qkv_in", "qkv"}, {"qkv_out", "qkv"}});
  }
  CopyV(in, out, heads);
}

void QkNormInPlace(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
                   int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads,
                   int64_t head_dim, double eps, c10::string_view rounding,
                   double weight_offset, int64_t rotary_dim,
                   const std::optional<at::Tensor>& cos, const std::optional<at::Tensor>& sin,
                   const std::optional<at::Tensor>& positions) {
  QkCall("qk_norm_", qkv, qkv, true, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads,
         head_dim, eps, rounding, weight_offset, rotary_dim, cos, sin, positions);
}

at::Tensor QkNorm(const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
                  int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads,
                  int64_t head_dim, double eps, c10::string_view rounding, double weight_offset,
                  int64_t rotary_dim, const std::optional<at::Tensor>& cos,
                  const std::optional<at::Tensor>& sin,
                  const std::optional<at::Tensor>& positions) {
  at::Tensor out = NewOutput(qkv.sizes(), qkv.options());
  QkCall("qk_norm", qkv, out, false, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads,
         head_dim, eps, rounding, weight_offset, rotary_dim, cos, sin, positions);
  return out;
}

// (q, scales) of the quant ops: q [..., D] of `dtype`; scales float32, [rows]
// per token (dynamic, the kernel writes them) or [1] holding the static scale.
std::tuple<at::Tensor, at::Tensor> QuantBuffers(const char* op, const at::Tensor& like,
                                                at::ScalarType dtype,
                                                std::optional<double> scale) {
  TORCH_CHECK_TYPE(dtype == at::kChar || dtype == at::kFloat8_e4m3fn, "glmnorm.", op,
                   ": dtype must be torch.int8 or torch.float8_e4m3fn, got ", dtype);
  const int64_t rows = like.dim() == 0 ? 1 : like.numel() / std::max<int64_t>(like.size(-1), 1);
  const auto f32 = like.options().dtype(at::kFloat);
  if (!scale.has_value()) return {NewOutput(like.sizes(), like.options().dtype(dtype)),
                                  at::empty({rows}, f32)};
  const float checked = glmnorm::Float32Argument("scale", *scale);  // before torch narrows it
  return {NewOutput(like.sizes(), like.options().dtype(dtype)), at::full({1}, checked, f32)};
}

// A static scale, or the per-row scales the kernel writes.
glmnorm::QuantOptions Quant(const char* op, std::optional<double> scale,
                            const at::Tensor& scales) {
  if (scale.has_value()) {
    return {glmnorm::QuantScaling::kStatic, glmnorm::Float32Argument("scale", *scale), {}};
  }
  return {glmnorm::QuantScaling::kDynamicPerToken, 1.0f, View<void*>(op, scales, "scales")};
}

std::tuple<at::Tensor, at::Tensor> RmsNormQuant(const at::Tensor& x, const at::Tensor& weight,
                                                at::ScalarType dtype,
                                                std::optional<double> scale, double eps,
                                                c10::string_view rounding,
                                                double weight_offset) {
  constexpr const char* kOp = "rms_norm_quant";
  try {
    auto [q, scales] = QuantBuffers(kOp, x, dtype, scale);
    const auto o = Options(eps, rounding, weight_offset);
    const auto xv = View<const void*>(kOp, x, "x");
    const auto wv = View<const void*>(kOp, weight, "weight");
    glmnorm::RmsNormQuant(xv, wv, View<void*>(kOp, q, "out"), Quant(kOp, scale, scales), o);
    return {q, scales};
  } catch (const glmnorm::Error& e) {
    Rethrow(kOp, e);
  }
}

std::tuple<at::Tensor, at::Tensor> AddRmsNormQuant(
    const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
    at::ScalarType dtype, std::optional<double> scale, double eps, c10::string_view rounding,
    double weight_offset, bool normalize_rounded_sum) {
  constexpr const char* kOp = "add_rms_norm_quant";
  try {
    auto [q, scales] = QuantBuffers(kOp, residual, dtype, scale);
    const glmnorm::AddNormOptions o{Options(eps, rounding, weight_offset), normalize_rounded_sum};
    const auto rv = View<void*>(kOp, residual, "residual");
    const auto dv = View<const void*>(kOp, delta, "delta");
    const auto wv = View<const void*>(kOp, weight, "weight");
    const auto qv = View<void*>(kOp, q, "out");
    const auto quant = Quant(kOp, scale, scales);
    MarkWritten(residual);
    glmnorm::AddRmsNormQuant(rv, dv, wv, qv, quant, o);
    return {q, scales};
  } catch (const glmnorm::Error& e) {
    Rethrow(kOp, e);
  }
}

// --- backward kernels ---------------------------------------------------------

// (dx, dweight) of rms_norm: dx in x's dtype, dweight in weight's dtype. The
// mixed-dtype rounding of dh = dy * gamma (torch autograd's) is the kernel's
// (RmsNormBackward). Workspace: the library's per-thread arena.
std::tuple<at::Tensor, at::Tensor> RmsNormBackward(const at::Tensor& x, const at::Tensor& weight,
                                                   const at::Tensor& dy, double eps,
                                                   c10::string_view rounding,
                                                   double weight_offset) {
  constexpr const char* kOp = "rms_norm_backward";
  try {
    const auto o = Options(eps, rounding, weight_offset);
    const auto xv = View<const void*>(kOp, x, "x");
    const auto wv = View<const void*>(kOp, weight, "weight");
    const auto dyv = View<const void*>(kOp, dy, "dy");
    at::Tensor dx = NewOutput(x.sizes(), x.options());
    at::Tensor dweight = at::empty(weight.sizes(), weight.options());
    glmnorm::RmsNormBackward(xv, wv, dyv, View<void*>(kOp, dx, "dx"),
                             View<void*>(kOp, dweight, "dweight"), o);
    return {dx, dweight};
  } catch (const glmnorm::Error& e) {
    Rethrow(kOp, e);
  }
}

// (dqkv_in, dq_weight, dk_weight) of the functional qk_norm, with the
// forward's RoPE arguments when it had RoPE: dqkv_in is a copy of dqkv (v
// passes through) with its q and k columns replaced by the input gradient.
std::tuple<at::Tensor, at::Tensor, at::Tensor> QkNormBackward(
    const at::Tensor& qkv, const at::Tensor& q_weight, const at::Tensor& k_weight,
    const at::Tensor& dqkv, int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads,
    int64_t head_dim, double eps, c10::string_view rounding, double weight_offset,
    int64_t rotary_dim, const std::optional<at::Tensor>& cos,
    const std::optional<at::Tensor>& sin, const std::optional<at::Tensor>& positions) {
  constexpr const char* kOp = "qk_norm_backward";
  try {
    const glmnorm::QkHeads heads =
        glmnorm::QkHeadsFrom(num_q_heads, num_k_heads, num_v_heads, head_dim);
    const glmnorm::Rope rope = RopeOf(kOp, rotary_dim, cos, sin, positions);
    const auto o = Options(eps, rounding, weight_offset);
    // dqkv is checked by the library as given (dtype, shape: no conversion,
    // no broadcast); dqkv_in is new, in qkv's dtype, and v's columns are
    // copied from dqkv afterwards (v passes through).
    at::Tensor din = NewOutput(qkv.sizes(), qkv.options());
    at::Tensor dq = at::empty(q_weight.sizes(), q_weight.options());
    at::Tensor dk = at::empty(k_weight.sizes(), k_weight.options());
    glmnorm::QkNormBackward(View<const void*>(kOp, qkv, "qkv"),
                            View<const void*>(kOp, dqkv, "dqkv"), View<void*>(kOp, din, "dqkv_in"),
                            heads, View<const void*>(kOp, q_weight, "q_weight"),
                            View<const void*>(kOp, k_weight, "k_weight"),
                            View<void*>(kOp, dq, "dq_weight"), View<void*>(kOp, dk, "dk_weight"),
                            o, rope);
    CopyV(dqkv, din, heads);
    return {din, dq, dk};
  } catch (const glmnorm::Error& e) {
    Rethrow(kOp, e, {{"dqkv_out", "dqkv"}});
  }
}

// --- autograd ---------------------------------------------------------------------

// The op `name` ("glmnorm::rms_norm") as the dispatcher calls it.
template <typename Fn>
c10::TypedOperatorHandle<Fn> FindOp(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool AnyRequiresGrad(std::initializer_list<const at::Tensor*> ts) {
  if (!c10::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : ts) {
    if (t->requires_grad()) return true;
  }
  return false;
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps, c10::string_view rounding, double weight_offset) {
    static const auto op = FindOp<decltype(RmsNorm)>("glmnorm::rms_norm");
    at::Tensor y;
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      y = op.call(x, weight, eps, rounding, weight_offset);
    }
    ctx->save_for_backward({x, weight});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["rounding"] = std::string(rounding.data(), rounding.size());
    ctx->saved_data["weight_offset"] = weight_offset;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = FindOp<decltype(RmsNormBackward)>("glmnorm::rms_norm_backward");
    if (!grads[0].defined()) return variable_list(5);  // no gradient reached y
    const variable_list saved = ctx->get_saved_variables();
    const std::string rounding = ctx->saved_data["rounding"].toStringRef();
    auto [dx, dweight] = op.call(saved[0], saved[1], grads[0].contiguous(),
                                 ctx->saved_data["eps"].toDouble(), rounding,
                                 ctx->saved_data["weight_offset"].toDouble());
    return {dx, dweight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor RmsNormAutograd(c10::DispatchKeySet keys, const at::Tensor& x,
                           const at::Tensor& weight, double eps, c10::string_view rounding,
                           double weight_offset) {
  if (!AnyRequiresGrad({&x, &weight})) {  // forward only: straight below autograd
    static const auto op = FindOp<decltype(RmsNorm)>("glmnorm::rms_norm");
    return op.redispatch(keys & c10::after_autograd_keyset, x, weight, eps, rounding,
                         weight_offset);
  }
  return RmsNormFunction::apply(x, weight, eps, rounding, weight_offset);
}

using QkFn = decltype(QkNorm);

class QkNormFunction : public torch::autograd::Function<QkNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv,
                            const at::Tensor& q_weight, const at::Tensor& k_weight,
                            int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads,
                            int64_t head_dim, double eps, c10::string_view rounding,
                            double weight_offset, int64_t rotary_dim,
                            const std::optional<at::Tensor>& cos,
                            const std::optional<at::Tensor>& sin,
                            const std::optional<at::Tensor>& positions) {
    static const auto op = FindOp<QkFn>("glmnorm::qk_norm");
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      out = op.call(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim,
                    eps, rounding, weight_offset, rotary_dim, cos, sin, positions);
    }
    // Absent tables are saved as undefined tensors (save_for_backward keeps the order).
    ctx->save_for_backward({qkv, q_weight, k_weight, cos.value_or(at::Tensor()),
                            sin.value_or(at::Tensor()), positions.value_or(at::Tensor())});
    ctx->saved_data["heads"] = std::vector<int64_t>{num_q_heads, num_k_heads, num_v_heads,
                                                    head_dim, rotary_dim};
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["rounding"] = std::string(rounding.data(), rounding.size());
    ctx->saved_data["weight_offset"] = weight_offset;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = FindOp<decltype(QkNormBackward)>("glmnorm::qk_norm_backward");
    if (!grads[0].defined()) return variable_list(14);
    const variable_list saved = ctx->get_saved_variables();
    const std::vector<int64_t> h = ctx->saved_data["heads"].toIntVector();
    const std::string rounding = ctx->saved_data["rounding"].toStringRef();
    auto optional = [](const at::Tensor& t) {
      return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
    };
    auto [dqkv, dq, dk] = op.call(saved[0], saved[1], saved[2], grads[0].contiguous(), h[0],
                                  h[1], h[2], h[3], ctx->saved_data["eps"].toDouble(), rounding,
                                  ctx->saved_data["weight_offset"].toDouble(), h[4],
                                  optional(saved[3]), optional(saved[4]), optional(saved[5]));
    variable_list out{dqkv, dq, dk};
    out.resize(14);  // no gradient for the other arguments
    return out;
  }
};

at::Tensor QkNormAutograd(const at::Tensor& qkv, const at::Tensor& q_weight,
                          const at::Tensor& k_weight, int64_t num_q_heads, int64_t num_k_heads,
                          int64_t num_v_heads, int64_t head_dim, double eps,
                          c10::string_view rounding, double weight_offset, int64_t rotary_dim,
                          const std::optional<at::Tensor>& cos,
                          const std::optional<at::Tensor>& sin,
                          const std::optional<at::Tensor>& positions) {
  if (AnyRequiresGrad({&qkv, &q_weight, &k_weight})) {
    // The tables are inputs of the rotation, not parameters: no gradient flows
    // to them, so one that asks for it is refused rather than left at None.
    for (const auto* t : {&cos, &sin}) {
      TORCH_CHECK(!(t->has_value() && (*t)->requires_grad()),
                  "glmnorm: torch.ops.glmnorm.qk_norm: cos / sin require grad, but the op has "
                  "no gradient for the RoPE tables; detach them");
    }
    return QkNormFunction::apply(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads,
                                 head_dim, eps, rounding, weight_offset, rotary_dim, cos, sin,
                                 positions);
  }
  static const auto op = FindOp<QkFn>("glmnorm::qk_norm");
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim, eps,
                 rounding, weight_offset, rotary_dim, cos, sin, positions);
}

// The Autograd kernel of the ops without a backward: refuses
// (RuntimeError, at the call) when grad mode is on and an input requires
// grad, instead of PyTorch's default for ops without autograd (a warning and
// silently no gradient); otherwise passes the call on below autograd. In C++
// so that calls outside inference_mode pay no Python frame (a Python autograd
// registration cost ~5 us a call).
void RefuseGrad(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                torch::jit::Stack* stack) {
  if (c10::GradMode::is_enabled()) {
    const std::string& qualified = op.schema().name();  // "glmnorm::rms_norm"
    const std::string name = qualified.substr(qualified.find("::") + 2);
    const size_t n = op.schema().arguments().size();
    for (size_t i = stack->size() - n; i < stack->size(); ++i) {
      const c10::IValue& v = (*stack)[i];
      const bool is_backward = name.size() > 9 && name.substr(name.size() - 9) == "_backward";
      TORCH_CHECK(!(v.isTensor() && v.toTensor().requires_grad()),
                  "glmnorm: torch.ops.glmnorm.", name,
                  is_backward
                      ? " has no backward: glmnorm has no double backward (create_graph=True, "
                        "higher-order gradients). Use first-order gradients, or PyTorch's own "
                        "ops where a second derivative is needed."
                      : " has no backward (it updates its input in place or quantises: the "
                        "differentiable ops are rms_norm and the functional qk_norm; in training "
                        "use them, or add the residual in PyTorch). Run under torch.no_grad() / "
                        "torch.inference_mode(), or detach the inputs.");
    }
  }
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

}  // namespace
}  // namespace glmnorm_torch

TORCH_LIBRARY_IMPL(glmnorm, CPU, m) {
  m.impl("rms_norm", &glmnorm_torch::RmsNorm);
  m.impl("add_rms_norm", &glmnorm_torch::AddRmsNorm);
  m.impl("qk_norm_", &glmnorm_torch::QkNormInPlace);
  m.impl("qk_norm", &glmnorm_torch::QkNorm);
  m.impl("rms_norm_quant", &glmnorm_torch::RmsNormQuant);
  m.impl("add_rms_norm_quant", &glmnorm_torch::AddRmsNormQuant);
  m.impl("rms_norm_backward", &glmnorm_torch::RmsNormBackward);
  m.impl("qk_norm_backward", &glmnorm_torch::QkNormBackward);
}

TORCH_LIBRARY_IMPL(glmnorm, Autograd, m) {
  m.impl("rms_norm", &glmnorm_torch::RmsNormAutograd);
  m.impl("qk_norm", &glmnorm_torch::QkNormAutograd);
  for (const char* name : {"add_rms_norm", "qk_norm_", "rms_norm_quant", "add_rms_norm_quant",
                           "rms_norm_backward", "qk_norm_backward"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&glmnorm_torch::RefuseGrad>());
  }
}
