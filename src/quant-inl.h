// RmsNormQuant row kernels (quant.h), compiled once per SIMD target (see
// kernels_*.cc): RmsNorm's y, rounded to the dtype RmsNorm would store it in
// (cast-then-scale) or kept in float32 (single rounding), then
// q = saturate(RNE(y / scale)) as int8 or e4m3.

#if defined(GLMNORM_SRC_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_QUANT_INL_H_
#undef GLMNORM_SRC_QUANT_INL_H_
#else
#define GLMNORM_SRC_QUANT_INL_H_
#endif

#include "kernel_args.h"
#include "norm_row-inl.h"
#include "simd_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

template <typename T, typename W, typename V, bool kCastThenScale, bool kE4M3>
void RmsNormQuantRowsTyped(const RmsNormQuantJob& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  const W* gamma = static_cast<const W*>(job.gamma);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* x = static_cast<const T*>(job.x) + job.x_rows.Offset(row);
    uint8_t* q = static_cast<uint8_t*>(job.q) + job.q_rows.Offset(row);
    const auto load = [x](auto dd, size_t i) { return LoadF32(dd, x + i); };
    const auto load_partial = [x](auto dd, size_t i, size_t n) {
      return LoadF32Partial(dd, x + i, n);
    };
    const InvRms inv = RowInverseRms(d, width, job.p.eps, load, load_partial);
    QuantizeRow<T, W, V, kCastThenScale, kE4M3>(d, width, inv, gamma, job.p.weight_offset,
                                                job.quant, row, q, load, load_partial, load,
                                                load_partial);
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

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
