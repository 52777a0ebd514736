// The jobs of the quantised norms (quant.h): quant.cc -> quant_cpu.cc.
#ifndef GLMNORM_SRC_OPS_QUANT_QUANT_JOB_H_
#define GLMNORM_SRC_OPS_QUANT_QUANT_JOB_H_

#include <cstdint>

#include "core/job.h"
#include "ops/add_rms_norm/add_rms_norm_job.h"

namespace glmnorm {

// RmsNormQuant: p.y_type is the value dtype quantised (f32 in single-rounding
// mode, Promote(w, x) in cast-then-scale mode).
struct RmsNormQuantJob {
  JobSize size;
  NormParams p;
  const void* x = nullptr;
  RowLayout x_rows;
  void* q = nullptr;
  RowLayout q_rows;
  const void* gamma = nullptr;
  QuantParams quant;
};

// AddRmsNormQuant: AddRmsNorm's job with y quantised (y is q).
struct AddRmsNormQuantJob : AddRmsNormJob {
  QuantParams quant;
};

template <>
struct OpKernels<RmsNormQuantJob> {
  static void CpuRows(const RmsNormQuantJob& job, int64_t row_begin, int64_t row_end);
};
template <>
struct OpKernels<AddRmsNormQuantJob> {
  static void CpuRows(const AddRmsNormQuantJob& job, int64_t row_begin, int64_t row_end);
};

}  // namespace glmnorm

#endif  // GLMNORM_SRC_OPS_QUANT_QUANT_JOB_H_
