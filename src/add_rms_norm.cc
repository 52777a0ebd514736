// AddRmsNorm front end: validates, then splits rows over threads.
#include "glmnorm/add_rms_norm.h"

#include "add_rms_norm_validate.h"
#include "kernels.h"
#include "parallel.h"
#include "validate.h"

namespace glmnorm {

namespace detail {

void ValidateAddInputs(const char* fn, const TensorView& residual, const ConstTensorView& delta,
                       const ConstTensorView& gamma, const AddNormOptions& options) {
  validate::Options(fn, options);
  validate::Activation(fn, "residual", residual);
  validate::Activation(fn, "delta", delta);
  validate::SameShape(fn, "residual", residual, "delta", delta);
  validate::Gamma(fn, "gamma", gamma, residual.width());
  if (delta.dtype != residual.dtype &&
      !(residual.dtype == DType::kF32 &&
        (delta.dtype == DType::kBF16 || delta.dtype == DType::kF16))) {
    validate::Fail(fn, "delta.dtype must be " + std::string(Name(residual.dtype)) +
                           " (residual's dtype), or bf16/f16 with an f32 residual, got " +
                           std::string(Name(delta.dtype)));
  }
  if (gamma.dtype != DType::kF32 && gamma.dtype != delta.dtype) {
    validate::Fail(fn, "gamma.dtype must be f32 or delta's dtype " + std::string(Name(delta.dtype)) +
                           ", got " + std::string(Name(gamma.dtype)));
  }
  validate::NoPartialOverlap(fn, "delta", delta, "residual", residual, /*allow_same=*/false);
}

AddRmsNormJob MakeAddJob(const TensorView& residual, const ConstTensorView& delta,
                         const ConstTensorView& gamma, const TensorView& y, DType value_type,
                         const AddNormOptions& options) {
  AddRmsNormJob job;
  job.p = NormParams::Of(residual.dtype, gamma.dtype, value_type, residual.width(), options);
  job.delta_type = delta.dtype;
  job.normalize_rounded_sum = options.normalize_rounded_sum;
  job.residual = residual.data;
  job.residual_rows = RowLayout::Of(residual);
  job.delta = delta.data;
  job.delta_rows = RowLayout::Of(delta);
  job.y = y.data;
  job.y_rows = RowLayout::Of(y);
  job.gamma = gamma.data;
  return job;
}

}  // namespace detail

namespace {
constexpr const char* kFn = "AddRmsNorm";
}  // namespace

void AddRmsNorm(const TensorView& residual, const ConstTensorView& delta,
                const ConstTensorView& gamma, const TensorView& y,
                const AddNormOptions& options) {
  detail::ValidateAddInputs(kFn, residual, delta, gamma, options);
  validate::Activation(kFn, "y", y);
  validate::SameShape(kFn, "residual", residual, "y", y);
  // Single rounding may also write the activations' dtype (delta's), so an
  // f32 residual stream can write bf16 y in place into delta.
  if (!(options.rounding == Rounding::kSingle && y.dtype == delta.dtype)) {
    validate::OutputDType(kFn, "y", y.dtype, gamma.dtype, residual.dtype, options.rounding);
  }
  validate::NoPartialOverlap(kFn, "residual", residual, "y", y, /*allow_same=*/false);
  validate::NoPartialOverlap(kFn, "delta", delta, "y", y, /*allow_same=*/true);

  if (validate::Empty(residual)) return;
  const AddRmsNormJob job = detail::MakeAddJob(residual, delta, gamma, y, y.dtype, options);
  const int64_t rows = residual.rows();
  const int64_t bytes = rows * residual.width() *
                        int64_t(2 * SizeOf(residual.dtype) + SizeOf(delta.dtype) + SizeOf(y.dtype));
  ForEachRowRange(options.executor, rows, bytes, [&job](int64_t begin, int64_t end) {
    kernels::AddRmsNormRows(job, begin, end);
  });
}

}  // namespace glmnorm
