// RmsNorm front end (rms_norm.h): validates the arguments into a job and
// hands it to the backend.
#include "glmnorm/rms_norm.h"

#include "backend/backend.h"
#include "core/validate.h"
#include "core/work_cost.h"
#include "glmnorm/rules.h"
#include "ops/rms_norm/rms_norm_job.h"

namespace glmnorm {

namespace {
constexpr const char* kFn = "RmsNorm";
}  // namespace

void ValidateRmsNorm(const ConstTensorView& x, const ConstTensorView& gamma,
                     const TensorView& y, const NormOptions& options) {
  validate::Options(kFn, options);
  validate::Activation(kFn, "x", x);
  validate::Activation(kFn, "y", y);
  validate::SameShape(kFn, "x", x, "y", y);
  validate::Gamma(kFn, "gamma", gamma, x.width());
  validate::OutputDType(kFn, "y", y.dtype, gamma.dtype, x.dtype, options.rounding);
  validate::Output(kFn, "y", y);
  validate::NoPartialOverlap(kFn, "x", x, "y", y, /*allow_same=*/true);
  validate::NoPartialOverlap(kFn, "gamma", gamma, "y", y, /*allow_same=*/false);
}

namespace {

void RunRmsNorm(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& y,
                const TensorView* rstd, const NormOptions& options,
                const Execution& execution) {
  if (validate::Empty(x)) return;
  RmsNormJob job;
  job.p = NormParams::Of(x.dtype, gamma.dtype, y.dtype, x.width(), options);
  job.x = x.data;
  job.x_rows = RowLayout::Of(x);
  job.y = y.data;
  job.y_rows = RowLayout::Of(y);
  job.gamma = gamma.data;
  job.size.rows = x.rows();
  job.size.work_ns = work_cost::Ns(job.size.rows * x.width(), work_cost::kRmsNorm);
  if (rstd != nullptr) {
    job.rstd = static_cast<float*>(rstd->data);
    job.rstd_stride = rstd->stride[0];
  }
  backend::Run(job, execution);
}

}  // namespace

void RmsNorm(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& y,
             const NormOptions& options, const Execution& execution) {
  ValidateRmsNorm(x, gamma, y, options);
  RunRmsNorm(x, gamma, y, nullptr, options, execution);
}

void RmsNormWithRstd(const ConstTensorView& x, const ConstTensorView& gamma,
                     const TensorView& y, const TensorView& rstd, const NormOptions& options,
                     const Execution& execution) {
  ValidateRmsNorm(x, gamma, y, options);
  validate::Rstd("RmsNormWithRstd", rstd, x.rows());
  validate::NoPartialOverlap("RmsNormWithRstd", "x", x, "rstd", rstd, false);
  validate::NoPartialOverlap("RmsNormWithRstd", "gamma", gamma, "rstd", rstd, false);
  validate::NoPartialOverlap("RmsNormWithRstd", "y", y, "rstd", rstd, false);
  RunRmsNorm(x, gamma, y, &rstd, options, execution);
}

DType RmsNormOutputDType(DType x, DType gamma, Rounding rounding) {
  return rounding == Rounding::kSingle ? x : Promote(gamma, x);
}

}  // namespace glmnorm
