// RmsNorm front end: validates, then splits rows over threads.
#include "glmnorm/rms_norm.h"

#include "kernels.h"
#include "parallel.h"
#include "validate.h"

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
  validate::NoPartialOverlap(kFn, "x", x, "y", y, /*allow_same=*/true);
}

void RmsNorm(const ConstTensorView& x, const ConstTensorView& gamma, const TensorView& y,
             const NormOptions& options) {
  ValidateRmsNorm(x, gamma, y, options);
  if (validate::Empty(x)) return;
  RmsNormJob job;
  job.p = NormParams::Of(x.dtype, gamma.dtype, y.dtype, x.width(), options);
  job.x = x.data;
  job.x_rows = RowLayout::Of(x);
  job.y = y.data;
  job.y_rows = RowLayout::Of(y);
  job.gamma = gamma.data;
  const int64_t rows = x.rows();
  job.stream = rows * x.width() * int64_t(SizeOf(y.dtype)) >= kStreamMinBytes;
  const int64_t bytes = rows * x.width() * int64_t(SizeOf(x.dtype) + SizeOf(y.dtype));
  ForEachRowRange(options.executor, rows, bytes, [&job](int64_t begin, int64_t end) {
    kernels::RmsNormRows(job, begin, end);
  });
}

}  // namespace glmnorm
