// Entry points of the SIMD kernels. Each call dispatches to the best target
// of this CPU (or the one a test forces with hwy::SetSupportedTargetsForTest).
#ifndef GLMNORM_SRC_KERNELS_H_
#define GLMNORM_SRC_KERNELS_H_

#include <cstdint>

#include "kernel_args.h"

namespace glmnorm::kernels {

// Normalises rows [row_begin, row_end) of job.
void RmsNormRows(const RmsNormJob& job, int64_t row_begin, int64_t row_end);

// AddRmsNorm (y stored) and AddRmsNormQuant (job.quantize: y quantised).
void AddRmsNormRows(const AddRmsNormJob& job, int64_t row_begin, int64_t row_end);
void AddRmsNormQuantRows(const AddRmsNormJob& job, int64_t row_begin, int64_t row_end);
void RmsNormQuantRows(const RmsNormQuantJob& job, int64_t row_begin, int64_t row_end);
// Tokens [row_begin, row_end) of a fused QKV buffer.
void QkNormRows(const QkNormJob& job, int64_t row_begin, int64_t row_end);

}  // namespace glmnorm::kernels

#endif  // GLMNORM_SRC_KERNELS_H_
