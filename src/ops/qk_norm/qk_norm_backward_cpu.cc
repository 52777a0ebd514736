// QkNormBackward's CPU kernel of the RoPE backward as a pass of its own, for
// heads wider than kMaxRopeRowWidth (narrower heads are un-rotated in the
// norm backward's row loop, ops/rms_norm/rms_norm_backward_cpu.cc): the
// transposed rotation of simd/rope-inl.h (UnrotateHead) over the q and k
// heads of each token. Compiled once per SIMD target (foreach_target) and
// dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/qk_norm/qk_norm_backward_cpu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "ops/qk_norm/qk_norm_job.h"
#include "simd/convert-inl.h"
#include "simd/norm_row-inl.h"
#include "simd/rope-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

template <typename T>
void QkRopeBackwardRowsTyped(const QkRopeBackwardJob& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t rotary_dim = static_cast<size_t>(job.rope.rotary_dim);
  const int64_t hd = job.head_dim;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const float* cos = job.rope.Cos(row);
    const float* sin = job.rope.Sin(row);
    const T* in_row = static_cast<const T*>(job.in) + row * job.in_row_stride;
    T* out_row = static_cast<T*>(job.out) + row * job.out_row_stride;
    for (int64_t head = 0; head < job.heads; ++head) {
      const T* src = in_row + head * hd;
      T* dst = out_row + head * hd;
      UnrotateHead(d, rotary_dim, static_cast<size_t>(hd), src, cos, sin, dst);
    }
  }
}

void QkRopeBackwardRows(const QkRopeBackwardJob& job, int64_t row_begin, int64_t row_end) {
  WithFloatType(job.type, [&](auto t_tag) {
    using T = typename decltype(t_tag)::type;
    QkRopeBackwardRowsTyped<T>(job, row_begin, row_end);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glmnorm {
HWY_EXPORT(QkRopeBackwardRows);
void OpKernels<QkRopeBackwardJob>::CpuRows(const QkRopeBackwardJob& job, int64_t row_begin,
                                           int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(QkRopeBackwardRows)(job, row_begin, row_end);
}
}  // namespace glmnorm
#endif  // HWY_ONCE
