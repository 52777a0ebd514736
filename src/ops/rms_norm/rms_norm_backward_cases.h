// The norm backward's case table entries for the benchmark: the bytes a call
// moves.
#ifndef GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_CASES_H_
#define GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_CASES_H_

#include <cstdint>

#include "glmnorm/rms_norm_backward.h"
#include "ops/cases.h"

namespace glmnorm::cases {

// x and dy read, dx written, gamma read once, the float32 dgamma partials
// written and read back once (one row of width per kDGammaLeafRows rows), and
// dgamma written. `dres` > 0: also the incoming residual gradient read
// (AddRmsNormBackward), of that many bytes per element.
inline int64_t RmsNormBackwardBytes(int64_t rows, int64_t width, DType x, DType w, DType dy,
                                    DType dx, DType dgamma, int64_t dres_bytes = 0) {
  const int64_t blocks = (rows + kDGammaLeafRows - 1) / kDGammaLeafRows;
  return rows * width * (int64_t(SizeOf(x) + SizeOf(dy) + SizeOf(dx)) + dres_bytes) +
         width * int64_t(SizeOf(w) + SizeOf(dgamma)) + 2 * blocks * width * 4;
}

}  // namespace glmnorm::cases

#endif  // GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_CASES_H_
