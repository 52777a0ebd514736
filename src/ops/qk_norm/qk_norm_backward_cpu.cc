// QkNormBackward's CPU kernel of the RoPE backward (the norm backward is
// ops/rms_norm/rms_norm_backward_cpu.cc): the transposed rotation of
// simd/rope-inl.h (RotateHeadBackward) over the q and k heads of each token. Compiled once per
// SIMD target (foreach_target) and dispatched at run time.
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

// memcpy of a head's few bytes (GLM-4.5: 128) by whole vectors: a call to
// libc's memcpy per head took 12% of qk_norm_rope_backward's time.
HWY_INLINE void CopyBytes(const void* HWY_RESTRICT from, void* HWY_RESTRICT to, size_t bytes) {
  const hn::ScalableTag<uint8_t> du8;
  constexpr size_t N = hn::MaxLanes(du8);
  const uint8_t* src = static_cast<const uint8_t*>(from);
  uint8_t* dst = static_cast<uint8_t*>(to);
  size_t i = 0;
  for (; i + N <= bytes; i += N) hn::StoreU(hn::LoadU(du8, src + i), du8, dst + i);
  if (i < bytes) std::memcpy(dst + i, src + i, bytes - i);
}

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
      RotateHeadBackward(d, rotary_dim, src, cos, sin, dst);
      // Dims from rotary_dim on are not rotated: their gradient passes as is.
      CopyBytes(src + rotary_dim, dst + rotary_dim, (hd - rotary_dim) * sizeof(T));
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
