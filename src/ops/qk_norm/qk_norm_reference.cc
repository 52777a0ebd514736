#include "ops/qk_norm/qk_norm_reference.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/oracle.h"
#include "ops/rms_norm/rms_norm_reference.h"

namespace glmnorm::reference {

void QkNorm(const ConstTensorView& qkv_in, const TensorView& qkv_out, const QkHeads& heads,
            const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
            const NormOptions& options, const Rope& rope) {
  const int64_t hd = heads.head_dim;
  const size_t is = SizeOf(qkv_in.dtype), os = SizeOf(qkv_out.dtype);
  const DType o = qkv_out.dtype;
  std::vector<uint8_t> head(hd * os);
  const int64_t half = rope.rotary_dim / 2;
  for (int64_t t = 0; t < qkv_in.shape[0]; ++t) {
    for (int64_t h = 0; h < int64_t{heads.num_q_heads} + heads.num_k_heads; ++h) {
      const auto* x = static_cast<const char*>(qkv_in.data) + (t * qkv_in.stride[0] + h * hd) * is;
      auto* y = static_cast<char*>(qkv_out.data) + (t * qkv_out.stride[0] + h * hd) * os;
      reference::RmsNorm(Contiguous<const void*>(x, qkv_in.dtype, {1, hd}),
              h < heads.num_q_heads ? q_gamma : k_gamma,
              Contiguous<void*>(head.data(), o, {1, hd}), options);
      for (int64_t i = 0; i < hd; ++i) Store(y, o, i, Load(head.data(), o, i));
      if (half == 0) continue;
      const int64_t pos = rope.positions.rank != 0
                              ? static_cast<const int64_t*>(rope.positions.data)[t * rope.positions.stride[0]]
                              : t;
      const auto* c = static_cast<const float*>(rope.cos.data) + pos * rope.cos.stride[0];
      const auto* s = static_cast<const float*>(rope.sin.data) + pos * rope.sin.stride[0];
      for (int64_t i = 0; i < half; ++i) {
        const double a = Load(head.data(), o, i), b = Load(head.data(), o, i + half);
        Store(y, o, i, a * c[i] - b * s[i]);
        Store(y, o, i + half, b * c[i] + a * s[i]);
      }
    }
  }
}

}  // namespace glmnorm::reference
