// RmsNorm's job: what rms_norm.cc validates into and rms_norm_cpu.cc runs.
#ifndef GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_JOB_H_
#define GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_JOB_H_

#include <cstdint>

#include "core/job.h"

namespace glmnorm {

struct RmsNormJob {
  JobSize size;
  NormParams p;
  const void* x = nullptr;
  RowLayout x_rows;
  void* y = nullptr;
  RowLayout y_rows;
  const void* gamma = nullptr;
  float* rstd = nullptr;  // optional: rstd[row * rstd_stride] = r * prescale
  int64_t rstd_stride = 0;
};

template <>
struct OpKernels<RmsNormJob> {
  static void CpuRows(const RmsNormJob& job, int64_t row_begin, int64_t row_end);
};

}  // namespace glmnorm

#endif  // GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_JOB_H_
