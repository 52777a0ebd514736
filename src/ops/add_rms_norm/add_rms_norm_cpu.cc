// AddRmsNorm's CPU kernel, compiled once per SIMD target (foreach_target)
// and dispatched at run time. The row sequence is simd/add_norm_row-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/add_rms_norm/add_rms_norm_cpu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstdint>

#include "hwy/highway.h"
#include "ops/add_rms_norm/add_rms_norm_job.h"
#include "simd/add_norm_row-inl.h"
#include "simd/norm_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

void AddRmsNormRows(const AddRmsNormJob& job, int64_t row_begin, int64_t row_end) {
  const NormParams& p = job.p;
  WithResidualDeltaTypes(p.x_type, job.delta_type, [&](auto r_tag, auto dl_tag) {
    using R = typename decltype(r_tag)::type;
    using Dl = typename decltype(dl_tag)::type;
    WithQuantGammaType<Dl>(p.w_type, [&](auto w_tag) {  // f32 or delta's dtype
      using W = typename decltype(w_tag)::type;
      if (p.rounding == Rounding::kCastThenScale) {
        // y's dtype is Promote(W, R), checked by the front end.
        AddNormRows<R, Dl, W, PromotedT<W, R>, true, 0>(job, row_begin, row_end);
      } else {
        WithFloatType(p.y_type, [&](auto o_tag) {
          using O = typename decltype(o_tag)::type;
          AddNormRows<R, Dl, W, O, false, 0>(job, row_begin, row_end);
        });
      }
    });
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glmnorm {
HWY_EXPORT(AddRmsNormRows);
void OpKernels<AddRmsNormJob>::CpuRows(const AddRmsNormJob& job, int64_t row_begin,
                                       int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(AddRmsNormRows)(job, row_begin, row_end);
}
}  // namespace glmnorm
#endif  // HWY_ONCE
