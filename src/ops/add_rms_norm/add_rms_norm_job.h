// AddRmsNorm's job (add_rms_norm.cc -> add_rms_norm_cpu.cc), and the checks
// and job set-up that AddRmsNormQuant (ops/quant/) shares.
#ifndef GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_JOB_H_
#define GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_JOB_H_

#include <cstdint>

#include "core/job.h"
#include "glmnorm/add_rms_norm.h"

namespace glmnorm {

// residual <- R(residual + delta); y <- norm. p.x_type is residual's dtype R
// (the norm's T); p.y_type is y's dtype (the value dtype before quantising,
// for AddRmsNormQuantJob).
struct AddRmsNormJob {
  JobSize size;
  NormParams p;
  DType delta_type = DType::kF32;
  bool normalize_rounded_sum = true;
  void* residual = nullptr;
  RowLayout residual_rows;
  const void* delta = nullptr;
  RowLayout delta_rows;
  void* y = nullptr;  // y, or q for AddRmsNormQuantJob
  RowLayout y_rows;
  const void* gamma = nullptr;
  float* rstd = nullptr;  // optional: rstd[row * rstd_stride] = r * prescale
  int64_t rstd_stride = 0;
};

template <>
struct OpKernels<AddRmsNormJob> {
  static void CpuRows(const AddRmsNormJob& job, int64_t row_begin, int64_t row_end);
};

namespace detail {

// Checks residual, delta, gamma and options (not y) for `fn`.
void ValidateAddInputs(const char* fn, const TensorView& residual, const ConstTensorView& delta,
                       const ConstTensorView& gamma, const AddNormOptions& options);

// The job for valid arguments; value_type is p.y_type.
AddRmsNormJob MakeAddJob(const TensorView& residual, const ConstTensorView& delta,
                         const ConstTensorView& gamma, void* y, const RowLayout& y_rows,
                         DType value_type, const AddNormOptions& options);

}  // namespace detail
}  // namespace glmnorm

#endif  // GLMNORM_SRC_OPS_ADD_RMS_NORM_ADD_RMS_NORM_JOB_H_
