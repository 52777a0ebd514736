// The fused residual add + norm row sequence that AddRmsNorm and
// AddRmsNormQuant share, compiled once per SIMD target.

#if defined(GLMNORM_SRC_SIMD_ADD_NORM_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_ADD_NORM_ROW_INL_H_
#undef GLMNORM_SRC_SIMD_ADD_NORM_ROW_INL_H_
#else
#define GLMNORM_SRC_SIMD_ADD_NORM_ROW_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/job.h"
#include "hwy/cache_control.h"
#include "simd/convert-inl.h"
#include "simd/norm_row-inl.h"
#include "simd/quantize-inl.h"
#include "simd/reduction-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

// residual + delta where delta's NaN (quieted) wins wherever delta is NaN
// (docs/SPEC.md §10). A plain add keeps its first operand's NaN on x86 when
// both are NaN, and the compiler may swap the operands of an add. Only rows
// that hold NaN need this: finite rows use a plain add, and a row found to
// hold NaN after its residual was stored is mended by MendDeltaNaNs.
template <class V>
HWY_INLINE V AddResidualNaN(V residual, V delta) {
  return hn::IfThenElse(hn::IsNaN(delta), hn::Add(delta, delta), hn::Add(residual, delta));
}

// The stored residual R(residual + delta) of a row holding NaN, made what
// AddResidualNaN gives: R(delta's NaN, quieted) wherever delta is NaN. The
// other lanes are stored again unchanged (they are already R-rounded). Runs
// before anything reads the row again, and before y (which may be delta) is
// written.
template <class D, typename R, typename Dl>
HWY_NOINLINE void MendDeltaNaNs(D d, size_t width, R* HWY_RESTRICT res,
                                const Dl* HWY_RESTRICT del) {
  constexpr size_t N = hn::MaxLanes(d);
  for (size_t i = 0; i < width; i += N) {
    const size_t n = std::min(N, width - i);
    const auto dl = LoadF32Partial(d, del + i, n);
    if (hn::AllFalse(d, hn::IsNaN(dl))) continue;
    const auto s = hn::IfThenElse(hn::IsNaN(dl), hn::Add(dl, dl), LoadF32Partial(d, res + i, n));
    StoreF32AsPartial(d, s, res + i, n);
  }
}

// Rows [row_begin, row_end) of a fused add + norm: residual <- R(residual +
// delta), then y from the rounded (or float32) sum. kQuant: 0 stores y as O,
// 1 quantises it to int8, 2 to e4m3 (job.quant). Job is AddRmsNormJob or
// AddRmsNormQuantJob (ops/add_rms_norm/, ops/quant/): any struct with their
// members.
template <typename R, typename Dl, typename W, typename O, bool kCastThenScale, int kQuant,
          class Job>
void AddNormRowsWithGamma(const Job& job, const W* HWY_RESTRICT gamma, int64_t row_begin,
                          int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  const bool rounded = job.normalize_rounded_sum;
  const bool gamma_finite =
      !FastPathNeedsFiniteGamma<R, O>(d) || AllFinite(d, gamma, width);
  const bool native_bf16 = g_native_bf16;  // read once, not after every store
  const bool pairs = kQuant == 0 && PairsApply<R, W, O, kCastThenScale>(d, width);
  (void)pairs;  // read only where the target has the pair loops
  // The forward's 1/rms for a backward pass, when the caller asked for it.
  const auto save_rstd = [&job](int64_t row, const InvRms& inv) {
    if constexpr (requires { job.rstd; }) {
      if (job.rstd != nullptr) job.rstd[row * job.rstd_stride] = inv.r * inv.prescale;
    } else {
      (void)job, (void)row, (void)inv;
    }
  };
  // Given the row's 1/rms: y stored as O (or quantised) from the values of
  // `load`; make_store_load(kMayBeNaN) and store_load_partial give the same
  // values for the pass that writes y (they may store the residual too).
  // `h`: where the row's y is normalised from with no side effect (the
  // stored residual), for the 32-value loop of PairsApply's rows; nullptr
  // when the loads store too. ahead, ahead2: the next row's residual and
  // delta, prefetched by that loop (as by the loads).
  const auto finish_row = [&](int64_t row, const InvRms& inv, const auto& load,
                              const auto& load_partial, const auto& make_store_load,
                              const auto& store_load_partial, const R* h, const R* ahead,
                              const R* ahead2) {
    save_rstd(row, inv);
    if constexpr (kQuant == 0) {
      O* y = static_cast<O*>(job.y) + job.y_rows.Offset(row);
      WithRowPath(FastPathOk(gamma_finite, inv), [&](auto may_be_nan) {
        constexpr bool kMayBeNaN = decltype(may_be_nan)::value;
        size_t begin = 0;
        if (!kMayBeNaN && pairs && h != nullptr) {
          begin = NormalizePairs<false>(d, 0, width, inv.r, h, gamma, job.p.weight_offset, y,
                                        ahead, ahead2);
        }
        ForEachNormVectorSpan<R, W, kCastThenScale, kMayBeNaN>(
            d, begin, width, inv, gamma, job.p.weight_offset, make_store_load(may_be_nan),
            store_load_partial, StoreSink<O, kMayBeNaN>{y, native_bf16});
      });
    } else {
      uint8_t* q = static_cast<uint8_t*>(job.y) + job.y_rows.Offset(row);
      (void)h, (void)ahead, (void)ahead2;
      WithRowPath(FastPathOk(gamma_finite, inv), [&](auto may_be_nan) {
        QuantizeRow<R, W, O, kCastThenScale, kQuant == 2, decltype(may_be_nan)::value>(
            d, width, inv, gamma, job.p.weight_offset, job.quant, row, q, load, load_partial,
            make_store_load(may_be_nan), store_load_partial);
      });
    }
  };
  for (int64_t row = row_begin; row < row_end; ++row) {
    R* res = static_cast<R*>(job.residual) + job.residual_rows.Offset(row);
    const Dl* del = static_cast<const Dl*>(job.delta) + job.delta_rows.Offset(row);
    // The pass that writes y reads this row from cache: it prefetches the
    // next row's residual and delta, so that reads of memory stay in flight
    // (as in RmsNorm's row loop). A line already requested costs nothing more.
    const int64_t ahead = std::min(row + 1, row_end - 1);
    const R* res_ahead = static_cast<const R*>(job.residual) + job.residual_rows.Offset(ahead);
    const Dl* del_ahead = static_cast<const Dl*>(job.delta) + job.delta_rows.Offset(ahead);
    const auto prefetch_ahead = [=](size_t i) {
      hwy::Prefetch(res_ahead + i);
      hwy::Prefetch(del_ahead + i);
    };
    if (rounded) {
      // The norm reads the rounded sum, which is what residual must hold:
      // the first pass stores it (and reads it back, exactly, for the sum of
      // squares), and every later pass reads residual alone. Each index is
      // read before it is written; y (which may be delta) is written only in
      // the second pass. The same values as the general path below, fewer
      // instructions.
      const auto sum_store = [=](auto dd, size_t i) {
        const auto s = hn::Add(LoadF32(dd, res + i), LoadF32(dd, del + i));
        StoreF32AsWith(dd, s, res + i, native_bf16);
        if constexpr (std::is_same_v<R, float>) {
          return s;
        } else {
          return LoadF32(dd, res + i);  // R(s), widened
        }
      };
      const auto sum_store_partial = [=](auto dd, size_t i, size_t n) {
        const auto s = hn::Add(LoadF32Partial(dd, res + i, n), LoadF32Partial(dd, del + i, n));
        StoreF32AsPartial(dd, s, res + i, n);
        return LoadF32Partial(dd, res + i, n);
      };
      const auto h_load = [=](auto dd, size_t i) {
        prefetch_ahead(i);
        return LoadF32(dd, res + i);
      };
      const auto h_load_partial = [=](auto dd, size_t i, size_t n) {
        return LoadF32Partial(dd, res + i, n);
      };
      // RowInverseRms, with the rescaling and NaN paths reading the stored sum.
      // The rows of the pair loops (PairsApply) store and reload the sum 32
      // values at a time (Bf16Pairs, convert-inl.h), in the pair layout.
      const auto sum_of_squares = [&](auto pair_layout) {
        constexpr bool kPairLayout = decltype(pair_layout)::value;
        CanonicalSumSteps<decltype(d), kPairLayout> sum(d);
        size_t base = 0;
        for (; base + sum.kBlock <= width; base += sum.kBlock) {
          if constexpr (kPairLayout) {
#if GLMNORM_HAVE_BF16_PAIRS
            sum.BlockOfSquarePairs(d, base, [=](size_t i) {
              const Bf16Pairs r = LoadBf16Pairs(res + i), dl = LoadBf16Pairs(del + i);
              StoreBf16Pairs<false>(
                  {_mm512_add_ps(r.even, dl.even), _mm512_add_ps(r.odd, dl.odd)}, res + i);
              return LoadBf16Pairs(res + i);  // R(s), widened
            });
#endif
          } else {
            sum.Block(d, base, Squares(sum_store));
          }
        }
        return sum.Finish(d, base, width, Squares(sum_store), Squares(sum_store_partial));
      };
      float sum_sq;
      // (The pair loops exist with AVX512-BF16 only; AVX2's pair layout
      // serves bf16 rows read as they are, not sums stored on the way.)
      if constexpr (GLMNORM_HAVE_BF16_PAIRS && SquarePairsFor<R, decltype(d)>() &&
                    std::is_same_v<Dl, BF16>) {
        sum_sq = pairs ? sum_of_squares(std::true_type()) : sum_of_squares(std::false_type());
      } else {
        sum_sq = sum_of_squares(std::false_type());
      }
      if (HWY_UNLIKELY(std::isnan(sum_sq))) MendDeltaNaNs(d, width, res, del);
      const InvRms inv = InvRmsFromSum(d, width, job.p.eps, sum_sq, h_load, h_load_partial);
      finish_row(row, inv, h_load, h_load_partial, [&](auto) { return h_load; },
                 // Dl is R wherever the pair loop runs (PairsApply).
                 h_load_partial, res, res_ahead, reinterpret_cast<const R*>(del_ahead));
      continue;
    }
    // The float32 sum is normalised: every pass recomputes it from residual
    // and delta, and the second stores residual = R(sum) on the way.
    // The values the norm reads (no side effects).
    const auto load = [=](auto dd, size_t i) {
      return hn::Add(LoadF32(dd, res + i), LoadF32(dd, del + i));
    };
    const auto load_partial = [=](auto dd, size_t i, size_t n) {
      return hn::Add(LoadF32Partial(dd, res + i, n), LoadF32Partial(dd, del + i, n));
    };
    // The same with the NaN rule, for the paths that only rows holding NaN
    // or inf take (the row's NaN, the rescaling).
    const auto nan_load = [=](auto dd, size_t i) {
      return AddResidualNaN(LoadF32(dd, res + i), LoadF32(dd, del + i));
    };
    const auto nan_load_partial = [=](auto dd, size_t i, size_t n) {
      return AddResidualNaN(LoadF32Partial(dd, res + i, n), LoadF32Partial(dd, del + i, n));
    };
    // The same values, storing residual = R(s) on the way (y, which may be
    // delta, is stored after this, at the same index). kMayBeNaN as in
    // ForEachNormVectorSpan: false when the row is known to be finite.
    const auto make_store_load = [=](auto may_be_nan) {
      constexpr bool kMayBeNaN = decltype(may_be_nan)::value;
      return [=](auto dd, size_t i) {
        prefetch_ahead(i);
        const auto r = LoadF32(dd, res + i);
        const auto dl = LoadF32(dd, del + i);
        const auto s = kMayBeNaN ? AddResidualNaN(r, dl) : hn::Add(r, dl);
        StoreF32AsWith<kMayBeNaN>(dd, s, res + i, native_bf16);
        return s;
      };
    };
    const auto store_load_partial = [=](auto dd, size_t i, size_t n) {
      const auto s = AddResidualNaN(LoadF32Partial(dd, res + i, n), LoadF32Partial(dd, del + i, n));
      StoreF32AsPartial(dd, s, res + i, n);
      return s;
    };
    const float sum_sq = CanonicalSumOfSquares(d, width, load, load_partial);
    finish_row(row, InvRmsFromSum(d, width, job.p.eps, sum_sq, nan_load, nan_load_partial), load,
               load_partial, make_store_load, store_load_partial, nullptr, nullptr, nullptr);
  }
}

// The rows with gamma as W, or widened to float32 once when the call has
// several rows (WithWideGamma, norm_row-inl.h).
template <typename R, typename Dl, typename W, typename O, bool kCastThenScale, int kQuant,
          class Job>
void AddNormRows(const Job& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  // Rows of the 32-value loops split a bf16 gamma as cheaply as x: no widening.
  const size_t width = static_cast<size_t>(job.p.width);
  const bool widen = row_end - row_begin >= 4 &&
                     !(kQuant == 0 && PairsApply<R, W, O, kCastThenScale>(d, width));
  WithWideGamma(d, static_cast<const W*>(job.gamma), width, widen,
                [&](const auto* gamma) {
                  using G = std::remove_cv_t<std::remove_pointer_t<decltype(gamma)>>;
                  AddNormRowsWithGamma<R, Dl, G, O, kCastThenScale, kQuant>(
                      job, gamma, row_begin, row_end);
                });
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
