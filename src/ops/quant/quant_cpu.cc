// The CPU kernels of the quantised norms (quant.h), compiled once per SIMD
// target (foreach_target) and dispatched at run time: RmsNorm's or
// AddRmsNorm's y, rounded to the dtype it would be stored in (cast-then-
// scale) or kept in float32 (single rounding), then q = saturate(RNE(y /
// scale)) as int8 or e4m3 (simd/quantize-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/quant/quant_cpu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/quant/quant_job.h"
#include "simd/add_norm_row-inl.h"
#include "simd/convert-inl.h"
#include "simd/norm_row-inl.h"
#include "simd/quantize-inl.h"
#include "simd/reduction-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

template <typename T, typename W, typename V, bool kCastThenScale, bool kE4M3>
void RmsNormQuantRowsTyped(const RmsNormQuantJob& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  const W* gamma = static_cast<const W*>(job.gamma);
  const bool gamma_finite = !FastPathNeedsFiniteGamma<T, V>(d) || AllFinite(d, gamma, width);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* x = static_cast<const T*>(job.x) + job.x_rows.Offset(row);
    uint8_t* q = static_cast<uint8_t*>(job.q) + job.q_rows.Offset(row);
    const auto load = [x](auto dd, size_t i) { return LoadF32(dd, x + i); };
    const auto load_partial = [x](auto dd, size_t i, size_t n) {
      return LoadF32Partial(dd, x + i, n);
    };
    // The pass that writes q reads x from cache: it prefetches the next row
    // (as in RmsNorm's row loop), so that reads of memory stay in flight.
    const T* ahead =
        static_cast<const T*>(job.x) + job.x_rows.Offset(std::min(row + 1, row_end - 1));
    const auto load_prefetching = [x, ahead](auto dd, size_t i) {
      hwy::Prefetch(ahead + i);
      return LoadF32(dd, x + i);
    };
    const InvRms inv = RowInverseRms(d, width, job.p.eps, load, load_partial);
    WithRowPath(FastPathOk(gamma_finite, inv), [&](auto may_be_nan) {
      QuantizeRow<T, W, V, kCastThenScale, kE4M3, decltype(may_be_nan)::value>(
          d, width, inv, gamma, job.p.weight_offset, job.quant, row, q, load, load_partial,
          load_prefetching, load_partial);
    });
  }
}

void RmsNormQuantRows(const RmsNormQuantJob& job, int64_t row_begin, int64_t row_end) {
  const NormParams& p = job.p;
  const bool e4m3 = job.quant.q_type == DType::kF8E4M3;
  WithFloatType(p.x_type, [&](auto t_tag) {
    using T = typename decltype(t_tag)::type;
    WithQuantGammaType<T>(p.w_type, [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      using V = PromotedT<W, T>;
      if (p.rounding == Rounding::kCastThenScale) {
        if (e4m3) {
          RmsNormQuantRowsTyped<T, W, V, true, true>(job, row_begin, row_end);
        } else {
          RmsNormQuantRowsTyped<T, W, V, true, false>(job, row_begin, row_end);
        }
      } else if (e4m3) {
        RmsNormQuantRowsTyped<T, W, float, false, true>(job, row_begin, row_end);
      } else {
        RmsNormQuantRowsTyped<T, W, float, false, false>(job, row_begin, row_end);
      }
    });
  });
}

// Quantised y: gamma f32 or delta's dtype; the value quantised is y rounded
// to Promote(W, R) in cast-then-scale mode, the float32 y in single mode.
void AddRmsNormQuantRows(const AddRmsNormQuantJob& job, int64_t row_begin, int64_t row_end) {
  const NormParams& p = job.p;
  const bool e4m3 = job.quant.q_type == DType::kF8E4M3;
  WithResidualDeltaTypes(p.x_type, job.delta_type, [&](auto r_tag, auto dl_tag) {
    using R = typename decltype(r_tag)::type;
    using Dl = typename decltype(dl_tag)::type;
    WithQuantGammaType<Dl>(p.w_type, [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      using V = PromotedT<W, R>;
      if (p.rounding == Rounding::kCastThenScale) {
        if (e4m3) {
          AddNormRows<R, Dl, W, V, true, 2>(job, row_begin, row_end);
        } else {
          AddNormRows<R, Dl, W, V, true, 1>(job, row_begin, row_end);
        }
      } else if (e4m3) {
        AddNormRows<R, Dl, W, float, false, 2>(job, row_begin, row_end);
      } else {
        AddNormRows<R, Dl, W, float, false, 1>(job, row_begin, row_end);
      }
    });
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glmnorm {
HWY_EXPORT(RmsNormQuantRows);
HWY_EXPORT(AddRmsNormQuantRows);
void OpKernels<RmsNormQuantJob>::CpuRows(const RmsNormQuantJob& job, int64_t row_begin,
                                         int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(RmsNormQuantRows)(job, row_begin, row_end);
}
void OpKernels<AddRmsNormQuantJob>::CpuRows(const AddRmsNormQuantJob& job, int64_t row_begin,
                                            int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(AddRmsNormQuantRows)(job, row_begin, row_end);
}
}  // namespace glmnorm
#endif  // HWY_ONCE
