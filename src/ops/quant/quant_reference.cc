#include "ops/quant/quant_reference.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/oracle.h"

namespace glmnorm::reference {

int8_t QuantizeI8(float value, float scale) {
  const float t = value / scale;
  if (std::isnan(t)) return 0;
  const float r = std::nearbyint(t);  // default rounding mode: ties to even
  return static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f));
}

float F32FromE4M3(uint8_t bits) {
  const int e = (bits >> 3) & 0xF, m = bits & 7;
  float mag;
  if (e == 15 && m == 7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    mag = std::ldexp(static_cast<float>(m), -9);
  } else {
    mag = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  }
  return (bits & 0x80) ? -mag : mag;
}

uint8_t QuantizeE4M3(float value, float scale) {
  const float t = value / scale;
  const uint8_t sign = std::signbit(t) ? 0x80 : 0x00;
  if (std::isnan(t)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(t));
  uint8_t best = 0;
  double best_dist = std::numeric_limits<double>::infinity();
  for (int code = 0; code <= 0x7E; ++code) {  // 0x7E = 448, the largest finite
    const double dist = std::fabs(a - static_cast<double>(F32FromE4M3(static_cast<uint8_t>(code))));
    if (dist < best_dist || (dist == best_dist && (code & 1) == 0)) {
      best = static_cast<uint8_t>(code);
      best_dist = dist;
    }
  }
  return sign | best;  // beyond 448 the nearest is 448: saturation
}

float DynamicScale(const float* values, int64_t n, DType q_type) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(values[i])) m = std::max(m, std::fabs(double(values[i])));
  }
  if (m == 0.0) return 1.0f;
  const double qmax = q_type == DType::kF8E4M3 ? 448.0 : 127.0;
  // m / qmax rounded once to float32 (via float64: exact for a quotient of
  // floats), kept normal, then lowered until decoding qmax * scale is finite.
  const double exact = m / qmax;
  float scale = exact < 0x1p-126 ? 0x1p-126f : static_cast<float>(exact);
  while (std::isinf(static_cast<float>(double(scale) * qmax))) {
    scale = std::nextafter(scale, 0.0f);
  }
  return scale;
}

}  // namespace glmnorm::reference
