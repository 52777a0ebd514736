// The scalar reference quantisers of quant.h, written independently of the
// kernels (e4m3 by nearest-value search over the 127 finite magnitudes).
#ifndef GLMNORM_SRC_OPS_QUANT_QUANT_REFERENCE_H_
#define GLMNORM_SRC_OPS_QUANT_QUANT_REFERENCE_H_

#include <cstdint>
#include <string>

#include "glmnorm/base.h"

namespace glmnorm::reference {

int8_t QuantizeI8(float value, float scale);
uint8_t QuantizeE4M3(float value, float scale);
float F32FromE4M3(uint8_t bits);
// The dynamic per-token scale of quant.h: max|v| / qmax over the finite
// values, at least 2^-126, qmax * scale finite; 1 when that max is 0.
float DynamicScale(const float* values, int64_t n, DType q_type);

}  // namespace glmnorm::reference

#endif  // GLMNORM_SRC_OPS_QUANT_QUANT_REFERENCE_H_
