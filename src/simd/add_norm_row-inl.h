// The fused residual add + norm row sequence that AddRmsNorm and
// AddRmsNormQuant share, compiled once per SIMD target.

#if defined(GLMNORM_SRC_SIMD_ADD_NORM_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_ADD_NORM_ROW_INL_H_
#undef GLMNORM_SRC_SIMD_ADD_NORM_ROW_INL_H_
#else
#define GLMNORM_SRC_SIMD_ADD_NORM_ROW_INL_H_
#endif

#include "core/job.h"
#include "simd/convert-inl.h"
#include "simd/norm_row-inl.h"
#include "simd/quantize-inl.h"
#include "simd/reduction-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

// Rows [row_begin, row_end) of a fused add + norm: residual <- R(residual +
// delta), then y from the rounded (or float32) sum. kQuant: 0 stores y as O,
// 1 quantises it to int8, 2 to e4m3 (job.quant). Job is AddRmsNormJob or
// AddRmsNormQuantJob (ops/add_rms_norm/, ops/quant/): any struct with their
// members.
template <typename R, typename Dl, typename W, typename O, bool kCastThenScale, int kQuant,
          class Job>
void AddNormRows(const Job& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  const W* gamma = static_cast<const W*>(job.gamma);
  const bool rounded = job.normalize_rounded_sum;
  const bool gamma_finite =
      !FastPathNeedsFiniteGamma<R, O>(d) || AllFinite(d, gamma, width);
  for (int64_t row = row_begin; row < row_end; ++row) {
    R* res = static_cast<R*>(job.residual) + job.residual_rows.Offset(row);
    const Dl* del = static_cast<const Dl*>(job.delta) + job.delta_rows.Offset(row);
    // The values the norm reads (no side effects).
    const auto load = [=](auto dd, size_t i) {
      const auto s = hn::Add(LoadF32(dd, res + i), LoadF32(dd, del + i));
      return rounded ? RoundTo<R>(dd, s) : s;
    };
    const auto load_partial = [=](auto dd, size_t i, size_t n) {
      const auto s = hn::Add(LoadF32Partial(dd, res + i, n), LoadF32Partial(dd, del + i, n));
      return rounded ? RoundTo<R>(dd, s) : s;
    };
    // The same values, storing residual = R(s) on the way (y, which may be
    // delta, is stored after this, at the same index). kMayBeNaN as in
    // ForEachNormVectorSpan: false when the row is known to be finite.
    const auto make_store_load = [=](auto may_be_nan) {
      constexpr bool kMayBeNaN = decltype(may_be_nan)::value;
      return [=](auto dd, size_t i) {
        const auto s = hn::Add(LoadF32(dd, res + i), LoadF32(dd, del + i));
        StoreF32As<kMayBeNaN>(dd, s, res + i);
        return rounded ? RoundTo<R, kMayBeNaN>(dd, s) : s;
      };
    };
    const auto store_load_partial = [=](auto dd, size_t i, size_t n) {
      const auto s = hn::Add(LoadF32Partial(dd, res + i, n), LoadF32Partial(dd, del + i, n));
      StoreF32AsPartial(dd, s, res + i, n);
      return rounded ? RoundTo<R>(dd, s) : s;
    };
    const auto store_load = make_store_load(std::true_type{});
    const InvRms inv = RowInverseRms(d, width, job.p.eps, load, load_partial);
    if constexpr (requires { job.rstd; }) {
      if (job.rstd != nullptr) job.rstd[row * job.rstd_stride] = inv.r * inv.prescale;
    }
    if constexpr (kQuant == 0) {
      O* y = static_cast<O*>(job.y) + job.y_rows.Offset(row);
      WithRowPath(FastPathOk(gamma_finite, inv), [&](auto may_be_nan) {
        constexpr bool kMayBeNaN = decltype(may_be_nan)::value;
        ForEachNormVectorSpan<R, W, kCastThenScale, kMayBeNaN>(
            d, 0, width, inv, gamma, job.p.weight_offset, make_store_load(may_be_nan),
            store_load_partial, StoreSink<O, kMayBeNaN>{y});
      });
    } else {
      uint8_t* q = static_cast<uint8_t*>(job.y) + job.y_rows.Offset(row);
      QuantizeRow<R, W, O, kCastThenScale, kQuant == 2>(
          d, width, inv, gamma, job.p.weight_offset, job.quant, row, q, load, load_partial,
          store_load, store_load_partial);
    }
  }
}

// Supported (residual R, delta Dl): Dl == R, or R = f32 with Dl bf16/f16.
template <class Fn>
HWY_INLINE void WithResidualDeltaTypes(DType r, DType dl, const Fn& fn) {
  WithFloatType(r, [&](auto r_tag) {
    using R = typename decltype(r_tag)::type;
    if constexpr (std::is_same_v<R, float>) {
      WithFloatType(dl, [&](auto dl_tag) { fn(r_tag, dl_tag); });
    } else {
      fn(r_tag, r_tag);
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
