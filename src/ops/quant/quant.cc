// Front ends of the quantised norms (quant.h): validate the arguments into
// a job and hand it to the backend.
#include "glmnorm/quant.h"

#include <cmath>
#include <initializer_list>
#include <utility>
#include <string>

#include "backend/backend.h"
#include "core/format_number.h"
#include "core/validate.h"
#include "core/work_cost.h"
#include "ops/quant/quant_job.h"

namespace glmnorm {

namespace {

// q: same shape as `like`, i8 or e4m3, contiguous last dim, non-null.
template <typename Ptr>
void ValidateQ(const char* fn, const char* like_name, const BasicTensorView<Ptr>& like,
               const TensorView& q) {
  if (q.dtype != DType::kI8 && q.dtype != DType::kF8E4M3) {
    validate::FailDType(fn, "q.dtype must be i8 or f8e4m3, got " + std::string(Name(q.dtype)));
  }
  validate::SameShape(fn, like_name, like, "q", q);
  if (q.stride[q.rank - 1] != 1 && !validate::Empty(q)) {  // an empty view has no layout
    validate::FailNotContiguous(fn, "q.stride[" + std::to_string(q.rank - 1) + "] (last dim)",
                                q.stride[q.rank - 1]);
  }
  validate::View(fn, "q", q);
  validate::Output(fn, "q", q);
}

// The scaling options for the rows of `act` (x, or residual); with dynamic
// scales, also that they overlap neither q nor any input (`inputs`, gamma
// included). An empty `act` reads and writes no scale: `scales` may be null.
void ValidateQuantOptions(const char* fn, const QuantOptions& o, const char* act_name,
                          const ConstTensorView& act, const TensorView& q,
                          std::initializer_list<std::pair<const char*, ConstTensorView>> inputs) {
  if (o.scaling == QuantScaling::kStatic) {
    if (!std::isfinite(o.scale) || !(o.scale > 0.0f)) {
      validate::Fail(fn, "scale must be finite and > 0 for a static scale, got " +
                             ShortestString(o.scale));
    }
  } else if (o.scaling == QuantScaling::kDynamicPerToken) {
    // rows() only for a non-empty view: an empty one may have huge other dims.
    if (validate::Empty(act)) return;
    const int64_t rows = act.rows();
    const TensorView& s = o.scales;
    if (s.data == nullptr) {
      validate::Fail(fn, "scales must not be null for a dynamic per-token scale (" +
                             std::to_string(rows) + " floats)");
    }
    if (s.dtype != DType::kF32) {
      validate::FailDType(fn, "scales.dtype must be f32, got " + std::string(Name(s.dtype)));
    }
    if (!((s.rank == 1 || (s.rank == 2 && s.shape[1] == 1)) && s.shape[0] == rows)) {
      validate::Fail(fn, "scales must be [rows] or [rows, 1] with rows = " +
                             std::to_string(rows) + ", got " +
                             validate::ShapeString(s.shape, s.rank));
    }
    validate::View(fn, "scales", s);
    validate::Output(fn, "scales", s);
    if (reinterpret_cast<uintptr_t>(s.data) % 4 != 0) {
      validate::Fail(fn, "scales.data must be aligned to 4 bytes");
    }
    validate::NoPartialOverlap(fn, act_name, act, "scales", s, /*allow_same=*/false);
    for (const auto& [name, view] : inputs) {
      validate::NoPartialOverlap(fn, name, view, "scales", s, /*allow_same=*/false);
    }
    validate::NoPartialOverlap(fn, "q", AsConst(q), "scales", s, /*allow_same=*/false);
  } else {
    validate::Fail(fn, "scaling must be kStatic or kDynamicPerToken");
  }
}

// Gamma: f32 or the activation's dtype.
void ValidateQuantGamma(const char* fn, const ConstTensorView& gamma, DType act,
                        const char* act_name) {
  if (gamma.dtype != DType::kF32 && gamma.dtype != act) {
    validate::FailDType(fn, "gamma.dtype must be f32 or " + std::string(act_name) + "'s dtype " +
                           std::string(Name(act)) + " for a quantised output, got " +
                           std::string(Name(gamma.dtype)));
  }
}

QuantParams MakeQuantParams(const QuantOptions& o, DType q_type) {
  QuantParams p;
  p.q_type = q_type;
  p.dynamic = o.scaling == QuantScaling::kDynamicPerToken;
  p.scale = p.dynamic ? 1.0f : o.scale;
  p.scales = p.dynamic ? static_cast<float*>(o.scales.data) : nullptr;
  p.scales_stride = p.dynamic ? o.scales.stride[0] : 0;
  return p;
}

// The dtype of the value quantised (quant.h).
DType ValueType(const NormOptions& o, DType w, DType t) {
  return o.rounding == Rounding::kCastThenScale ? Promote(w, t) : DType::kF32;
}

}  // namespace

void RmsNormQuant(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& q,
                  const QuantOptions& quant, const NormOptions& options,
                  const Execution& execution) {
  constexpr const char* kFn = "RmsNormQuant";
  validate::Options(kFn, options);
  validate::Activation(kFn, "x", x);
  validate::Gamma(kFn, "gamma", gamma, x.width());
  ValidateQuantGamma(kFn, gamma, x.dtype, "x");
  ValidateQ(kFn, "x", x, q);
  ValidateQuantOptions(kFn, quant, "x", x, q, {{"gamma", gamma}});
  validate::NoPartialOverlap(kFn, "x", x, "q", q, /*allow_same=*/false);
  validate::NoPartialOverlap(kFn, "gamma", gamma, "q", q, /*allow_same=*/false);

  if (validate::Empty(x)) return;

  RmsNormQuantJob job;
  job.p = NormParams::Of(x.dtype, gamma.dtype, ValueType(options, gamma.dtype, x.dtype),
                         x.width(), options);
  job.x = x.data;
  job.x_rows = RowLayout::Of(x);
  job.q = q.data;
  job.q_rows = RowLayout::Of(q);
  job.gamma = gamma.data;
  job.quant = MakeQuantParams(quant, q.dtype);
  job.size.rows = x.rows();
  job.size.work_ns = work_cost::Ns(job.size.rows * x.width(), work_cost::kRmsNormQuant);
  backend::Run(job, execution);
}

void AddRmsNormQuant(const TensorView& residual, const ConstTensorView& delta,
                     const ConstTensorView& gamma, const TensorView& q,
                     const QuantOptions& quant, const AddNormOptions& options,
                     const Execution& execution) {
  constexpr const char* kFn = "AddRmsNormQuant";
  detail::ValidateAddInputs(kFn, residual, delta, gamma, options);
  ValidateQuantGamma(kFn, gamma, delta.dtype, "delta");
  ValidateQ(kFn, "residual", residual, q);
  ValidateQuantOptions(kFn, quant, "residual", AsConst(residual), q,
                       {{"delta", delta}, {"gamma", gamma}});
  validate::NoPartialOverlap(kFn, "residual", residual, "q", q, /*allow_same=*/false);
  validate::NoPartialOverlap(kFn, "delta", delta, "q", q, /*allow_same=*/false);
  validate::NoPartialOverlap(kFn, "gamma", gamma, "q", q, /*allow_same=*/false);

  if (validate::Empty(residual)) return;

  AddRmsNormQuantJob job;
  static_cast<AddRmsNormJob&>(job) =
      detail::MakeAddJob(residual, delta, gamma, q.data, RowLayout::Of(q),
                         ValueType(options, gamma.dtype, residual.dtype), options);
  job.quant = MakeQuantParams(quant, q.dtype);
  job.size.work_ns =
      work_cost::Ns(job.size.rows * residual.width(), work_cost::kAddRmsNormQuant);
  backend::Run(job, execution);
}

}  // namespace glmnorm
