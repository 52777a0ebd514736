// QkNorm's CPU kernel (+ partial RoPE, simd/rope-inl.h), compiled once per
// SIMD target (foreach_target) and dispatched at run time; and the check of
// the RoPE positions.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/qk_norm/qk_norm_cpu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/qk_norm/qk_norm_job.h"
#include "simd/convert-inl.h"
#include "simd/norm_row-inl.h"
#include "simd/reduction-inl.h"
#include "simd/rope-inl.h"
#include "simd/row_batch-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

template <typename T, typename W, typename O, bool kCastThenScale>
void QkNormRowsWithGammas(const QkNormJob& job, const W* HWY_RESTRICT q_gamma,
                          const W* HWY_RESTRICT k_gamma, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  const size_t rotary_dim = static_cast<size_t>(job.rope.rotary_dim);
  const int64_t heads = job.num_q_heads + job.num_k_heads;
  const bool native_bf16 = g_native_bf16;  // read once, not after every store
  // Non-finite gammas send every head to the NaN-safe path.
  const bool q_gamma_finite = job.num_q_heads == 0 || AllFinite(d, q_gamma, width);
  const bool k_gamma_finite = job.num_k_heads == 0 || AllFinite(d, k_gamma, width);
  // How far ahead of each read the normalising pass prefetches: 4 KiB, or
  // the whole next batch when heads are reduced 16 at once (a batch reads
  // its heads in one burst; f32 heads of 128 are 8 KiB).
  size_t prefetch_bytes = cpu::kPrefetchBytes;
  if (RowBatches<T>(width, heads)) {
    prefetch_bytes = std::max(prefetch_bytes, kRowBatch * width * sizeof(T));
  }
  // bf16 heads (bf16 gammas, cast-then-scale) whose batch NativeRowOk
  // admits take NormalizeNativeRows, each gamma split once per call, and
  // then RoPE over the stored heads (issue 16); other batches head by head.
  // Same bits either way.
#if GLMNORM_HAVE_ROW_BATCH && GLMNORM_HAVE_BF16_PAIRS
  bool native_heads = false;
  constexpr bool kNativeTypes = std::is_same_v<T, BF16> && std::is_same_v<O, BF16> &&
                                kCastThenScale && hn::MaxLanes(decltype(d)()) == 16;
  HWY_ALIGN float split_q[kNativeRowsMaxWidth], split_k[kNativeRowsMaxWidth];
  // A token's cos and sin in the lane order of RotateBf16HeadPairs.
  HWY_ALIGN float split_cos[kNativeRowsMaxWidth / 2], split_sin[kNativeRowsMaxWidth / 2];
  float q_min_abs = 0.0f, k_min_abs = 0.0f;
  if constexpr (kNativeTypes) {
    native_heads = native_bf16 && job.p.w_type == DType::kBF16 &&
                   RowBatches<T>(width, heads) && width <= kNativeRowsMaxWidth;
    if (native_heads) {
      // The gammas as given (bf16), whatever W the caller widened them to.
      const auto* q = static_cast<const BF16*>(job.q_gamma);
      const auto* k = static_cast<const BF16*>(job.k_gamma);
      if (job.num_q_heads > 0) {
        SplitNativeGamma(q, width, job.p.weight_offset, split_q);
        q_min_abs = MinNonzeroAbsOfGamma(q, width, job.p.weight_offset);
      }
      if (job.num_k_heads > 0) {
        SplitNativeGamma(k, width, job.p.weight_offset, split_k);
        k_min_abs = MinNonzeroAbsOfGamma(k, width, job.p.weight_offset);
      }
    }
  }
  // Stored bf16 heads rotate 32 pairs per step, with cos and sin split per token.
  const bool rotate_pairs = native_heads && rotary_dim > 0 && RotatesInPairs(rotary_dim);
#endif
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* in_row = static_cast<const T*>(job.in) + row * job.in_row_stride;
    O* out_row = static_cast<O*>(job.out) + row * job.out_row_stride;
    const float* cos = nullptr;
    const float* sin = nullptr;
    if (rotary_dim > 0) {
      cos = job.rope.Cos(row);
      sin = job.rope.Sin(row);
    }
    const auto head_of = [&](int64_t head) { return in_row + head * static_cast<int64_t>(width); };
    // What the normalising loops prefetch for the head at x: prefetch_bytes on.
    const auto ahead_of = [prefetch_bytes](const T* x) {
      return reinterpret_cast<const T*>(reinterpret_cast<const char*>(x) + prefetch_bytes);
    };
    // RoPE over a head as QkNorm alone stores it (docs/DECODER.md), read
    // back from y while it is in L1: the same values, so the same bits.
    const auto rotate_stored = [&](O* y) GLMNORM_INLINE_LAMBDA {
#if GLMNORM_HAVE_ROW_BATCH && GLMNORM_HAVE_BF16_PAIRS
      if constexpr (kNativeTypes) {
        if (rotate_pairs) {
          RotateBf16HeadPairs(rotary_dim, y, split_cos, split_sin);
          return;
        }
      }
#endif
      const auto stored = [y, d](size_t i, size_t m) {
        return m == hn::MaxLanes(d) ? LoadF32(d, y + i) : LoadF32Partial(d, y + i, m);
      };
      RotateHead(d, rotary_dim, stored, cos, sin, y, native_bf16);
    };
    // Head `head` given its 1/rms: normalised (and rotated) into out_row.
    const auto finish = [&](int64_t head, const InvRms& inv) {
      const W* gamma = head < job.num_q_heads ? q_gamma : k_gamma;
      const T* x = head_of(head);
      O* y = out_row + head * static_cast<int64_t>(width);
      // The heads of 128 are read from cache after their reduction: keep a
      // read of memory in flight, prefetch_bytes ahead (rms_norm_cpu.cc does
      // the same by rows). Heads and tokens are read in address order.
      const auto load = [x, prefetch_bytes](auto dd, size_t i) {
        hwy::Prefetch(reinterpret_cast<const char*>(x + i) + prefetch_bytes);
        return LoadF32(dd, x + i);
      };
      const auto load_partial = [x](auto dd, size_t i, size_t n) {
        return LoadF32Partial(dd, x + i, n);
      };
      const bool gamma_finite = head < job.num_q_heads ? q_gamma_finite : k_gamma_finite;
      WithRowPath(FastPathOk(gamma_finite, inv), [&](auto may_be_nan) {
        constexpr bool kMayBeNaN = decltype(may_be_nan)::value;
        size_t from = 0;
        // AVX2: bf16 heads 16 values per step (NormalizeAvx2Pairs), with
        // the gamma as given (bf16), whatever W it was widened to.
        if constexpr (!kMayBeNaN && Avx2PairTypes<T, BF16, O, kCastThenScale, decltype(d)>()) {
          if (job.p.w_type == DType::kBF16) {
            const auto* gamma16 =
                static_cast<const BF16*>(head < job.num_q_heads ? job.q_gamma : job.k_gamma);
            from = NormalizeAvx2Pairs<false>(d, 0, width, inv.r, x, gamma16, job.p.weight_offset,
                                             y, ahead_of(x));
          }
        }
        ForEachNormVectorSpan<T, W, kCastThenScale, kMayBeNaN>(
            d, from, width, inv, gamma, job.p.weight_offset, load, load_partial,
            StoreSink<O, kMayBeNaN>{y});
      });
      // A head holding NaN is its NaN throughout (docs/SPEC.md §10): not
      // rotated, so that NaNs in cos or sin cannot meet it.
      if (rotary_dim > 0 && !HWY_UNLIKELY(std::isnan(inv.r))) rotate_stored(y);
    };
#if GLMNORM_HAVE_ROW_BATCH && GLMNORM_HAVE_BF16_PAIRS
    if constexpr (kNativeTypes) {
      if (native_heads) {
        // A batch's q heads and k heads (each group with its own gamma).
        const auto finish_group = [&](int64_t first, size_t n, const InvRms* inv)
                                      GLMNORM_INLINE_LAMBDA {
          const bool q_group = first < job.num_q_heads;
          const auto row_of = [&](size_t j) {
            const int64_t head = first + static_cast<int64_t>(j);
            const T* x = head_of(head);
            return NativeRow{x, out_row + head * static_cast<int64_t>(width), ahead_of(x)};
          };
          if (!NormalizeNativeRowsIfOk<kRowBatch>(
                  width, n, inv, q_group ? q_gamma_finite : k_gamma_finite,
                  q_group ? q_min_abs : k_min_abs, q_group ? split_q : split_k, false, row_of)) {
            for (size_t j = 0; j < n; ++j) finish(first + static_cast<int64_t>(j), inv[j]);
            return;
          }
          // The group's heads are finite (FastPathOk): all rotated.
          for (size_t j = 0; rotary_dim > 0 && j < n; ++j) {
            rotate_stored(out_row + (first + static_cast<int64_t>(j)) * static_cast<int64_t>(width));
          }
        };
        if (rotate_pairs) {
          SplitPairsOf(cos, rotary_dim / 2, split_cos);
          SplitPairsOf(sin, rotary_dim / 2, split_sin);
        }
        ForEachRowBatchInvRms<T>(
            width, job.p.eps, 0, heads, head_of, [&](int64_t base, size_t n, const InvRms* inv) {
              const size_t q_heads = static_cast<size_t>(
                  std::clamp<int64_t>(job.num_q_heads - base, 0, static_cast<int64_t>(n)));
              finish_group(base, q_heads, inv);
              finish_group(base + static_cast<int64_t>(q_heads), n - q_heads, inv + q_heads);
            });
        continue;
      }
    }
#endif
    // 1/rms of head h + 1 before head h is normalised, or of 16 heads of
    // 128 at once (ForEachRowInvRms, row_batch-inl.h). Same bits.
    ForEachRowInvRms<T>(d, width, job.p.eps, 0, heads, head_of, finish);
  }
}

// Every row has heads sharing two gammas: both are widened to float32 once
// per call (WithWideGamma, norm_row-inl.h) for usual head dims.
template <typename T, typename W, typename O, bool kCastThenScale>
void QkNormRowsTyped(const QkNormJob& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  const auto* q = static_cast<const W*>(job.q_gamma);
  const auto* k = static_cast<const W*>(job.k_gamma);
  // Empty head groups may come with a null gamma: widen only what exists.
  const bool widen = job.num_q_heads > 0 && job.num_k_heads > 0;
  WithWideGamma<1024>(d, q, width, widen, [&](const auto* q_gamma) {
    using G = std::remove_cv_t<std::remove_pointer_t<decltype(q_gamma)>>;
    if constexpr (std::is_same_v<G, W>) {
      QkNormRowsWithGammas<T, W, O, kCastThenScale>(job, q, k, row_begin, row_end);
    } else {
      WithWideGamma<1024>(d, k, width, true, [&](const auto* k_gamma) {
        using Gk = std::remove_cv_t<std::remove_pointer_t<decltype(k_gamma)>>;
        if constexpr (std::is_same_v<Gk, float>) {
          QkNormRowsWithGammas<T, float, O, kCastThenScale>(job, q_gamma, k_gamma, row_begin,
                                                            row_end);
        } else {  // not reached: k has q's width, which fitted
          QkNormRowsWithGammas<T, W, O, kCastThenScale>(job, q, k, row_begin, row_end);
        }
      });
    }
  });
}

void QkNormRows(const QkNormJob& job, int64_t row_begin, int64_t row_end) {
  const NormParams& p = job.p;
  WithFloatType(p.x_type, [&](auto t_tag) {
    using T = typename decltype(t_tag)::type;
    WithQuantGammaType<T>(p.w_type, [&](auto w_tag) {  // f32 or the input's dtype
      using W = typename decltype(w_tag)::type;
      if (p.rounding == Rounding::kCastThenScale) {
        QkNormRowsTyped<T, W, PromotedT<W, T>, true>(job, row_begin, row_end);
      } else {
        WithFloatType(p.y_type, [&](auto o_tag) {
          using O = typename decltype(o_tag)::type;
          QkNormRowsTyped<T, W, O, false>(job, row_begin, row_end);
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
HWY_EXPORT(QkNormRows);
void OpKernels<QkNormJob>::CpuRows(const QkNormJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(QkNormRows)(job, row_begin, row_end);
}
// Plain C++: a scan of a few integers gains nothing from SIMD targets.
void OpKernels<RopePositionsCheckJob>::CpuRows(const RopePositionsCheckJob& job, int64_t, int64_t) {
  for (int64_t t = 0; t < job.tokens; ++t) {
    const int64_t pos = job.positions[job.layout.Offset(t)];
    if (pos < 0 || pos >= job.limit) {
      *job.bad_token = t;
      *job.bad_position = pos;
      return;
    }
  }
}
}  // namespace glmnorm
#endif  // HWY_ONCE
