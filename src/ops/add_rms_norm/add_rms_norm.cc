// AddRmsNorm front end (add_rms_norm.h): validates the arguments into a job
// and hands it to the backend.
#include "glmnorm/add_rms_norm.h"

#include <string>

#include "backend/backend.h"
#include "core/validate.h"
#include "core/work_cost.h"
#include "glmnorm/rules.h"
#include "ops/add_rms_norm/add_rms_norm_job.h"

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
    validate::FailDType(fn, "delta.dtype must be " + std::string(Name(residual.dtype)) +
                           " (residual's dtype), or bf16/f16 with an f32 residual, got " +
                           std::string(Name(delta.dtype)));
  }
  if (gamma.dtype != DType::kF32 && gamma.dtype != delta.dtype) {
    validate::FailDType(fn, "gamma.dtype must be f32 or delta's dtype " + std::string(Name(delta.dtype)) +
                           ", got " + std::string(Name(gamma.dtype)));
  }
  validate::Output(fn, "residual", residual);  // written too
  validate::NoPartialOverlap(fn, "delta", delta, "residual", residual, /*allow_same=*/false);
  validate::NoPartialOverlap(fn, "gamma", gamma, "residual", residual, /*allow_same=*/false);
}

AddRmsNormJob MakeAddJob(const TensorView& residual, const ConstTensorView& delta,
                         const ConstTensorView& gamma, void* y, const RowLayout& y_rows,
                         DType value_type, const AddNormOptions& options) {
  AddRmsNormJob job;
  job.p = NormParams::Of(residual.dtype, gamma.dtype, value_type, residual.width(), options);
  job.delta_type = delta.dtype;
  job.normalize_rounded_sum = options.normalize_rounded_sum;
  job.residual = residual.data;
  job.residual_rows = RowLayout::Of(residual);
  job.delta = delta.data;
  job.delta_rows = RowLayout::Of(delta);
  job.y = y;
  job.y_rows = y_rows;
  job.gamma = gamma.data;
  job.size.rows = residual.rows();
  return job;
}

}  // namespace detail

namespace {
void AddRmsNormImpl(const char* kFn, const TensorView& residual, const ConstTensorView& delta,
                    const ConstTensorView& gamma, const TensorView& y, const TensorView* rstd,
                    const AddNormOptions& options, const Execution& execution) {
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
  validate::NoPartialOverlap(kFn, "gamma", gamma, "y", y, /*allow_same=*/false);
  validate::Output(kFn, "y", y);
  if (rstd != nullptr) {
    validate::Rstd(kFn, *rstd, residual.rows());
    validate::NoPartialOverlap(kFn, "residual", residual, "rstd", *rstd, false);
    validate::NoPartialOverlap(kFn, "delta", delta, "rstd", *rstd, false);
    validate::NoPartialOverlap(kFn, "gamma", gamma, "rstd", *rstd, false);
    validate::NoPartialOverlap(kFn, "y", y, "rstd", *rstd, false);
  }
  if (validate::Empty(residual)) return;
  AddRmsNormJob job =
      detail::MakeAddJob(residual, delta, gamma, y.data, RowLayout::Of(y), y.dtype, options);
  job.size.work_ns = work_cost::Ns(job.size.rows * residual.width(), work_cost::kAddRmsNorm);
  if (rstd != nullptr) {
    job.rstd = static_cast<float*>(rstd->data);
    job.rstd_stride = rstd->stride[0];
  }
  backend::Run(job, execution);
}
}  // namespace

void AddRmsNorm(const TensorView& residual, const ConstTensorView& delta,
                const ConstTensorView& gamma, const TensorView& y,
                const AddNormOptions& options, const Execution& execution) {
  AddRmsNormImpl("AddRmsNorm", residual, delta, gamma, y, nullptr, options, execution);
}

void AddRmsNormWithRstd(const TensorView& residual, const ConstTensorView& delta,
                        const ConstTensorView& gamma, const TensorView& y,
                        const TensorView& rstd, const AddNormOptions& options,
                        const Execution& execution) {
  AddRmsNormImpl("AddRmsNormWithRstd", residual, delta, gamma, y, &rstd, options, execution);
}

DType AddRmsNormOutputDType(DType residual, DType delta, DType gamma, Rounding rounding) {
  return rounding == Rounding::kSingle ? delta : Promote(gamma, residual);
}

}  // namespace glmnorm
