// RmsNorm's CPU kernel, compiled once per SIMD target (Highway's
// foreach_target pattern: this file includes itself once per target) and
// dispatched at run time. The row op sequence is simd/norm_row-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/rms_norm/rms_norm_cpu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/rms_norm/rms_norm_job.h"
#include "simd/convert-inl.h"
#include "simd/norm_row-inl.h"
#include "simd/reduction-inl.h"
#include "simd/row_batch-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

// Values [begin, end) of a row's second pass: y = Scale((x * prescale) * r,
// gamma + offset) (norm_row-inl.h), stored as O. With `stream`, whole
// vectors at aligned addresses use streaming stores and the row's unaligned
// head and partial last vector plain ones; a span boundary inside the row
// moves forward by the head, so that every span but the first starts
// aligned (the spans of one row still cover it, once each). kMayBeNaN as in
// ForEachNormVectorSpan. `pairs`: the fast path of RmsNormPairs' rows, 32
// values at a time (then the head aligns y to 64 bytes), or 16 on AVX2
// (NormalizeAvx2Pairs, 32 bytes); `native`: the row takes
// NormalizeNativePairs there (NativeRowOk).
template <typename T, typename W, typename O, bool kCastThenScale, bool kMayBeNaN, class D,
          class Load, class LoadPartial>
HWY_INLINE void NormalizeSpan(D d, size_t width, size_t begin, size_t end, InvRms inv,
                              const W* HWY_RESTRICT gamma, float weight_offset, const T* x,
                              const T* ahead, O* y, bool stream, bool pairs, bool native,
                              const Load& load, const LoadPartial& load_partial) {
  const StoreSink<O, kMayBeNaN, false> store{y};
  const auto span = [&](size_t from, size_t to, const auto& sink,
                        auto streamed) GLMNORM_INLINE_LAMBDA {
    if constexpr (!kMayBeNaN) {
      if (pairs) {
        constexpr bool kStream = decltype(streamed)::value;
        if constexpr (Avx2PairTypes<T, W, O, kCastThenScale, D>()) {
          from = NormalizeAvx2Pairs<kStream>(d, from, to, inv.r, x, gamma, weight_offset, y, ahead);
        } else if (native) {
          from =
              NormalizeNativePairs<kStream>(d, from, to, inv.r, x, gamma, weight_offset, y, ahead);
        } else {
          from = NormalizePairs<kStream>(d, from, to, inv.r, x, gamma, weight_offset, y, ahead);
        }
      }
    }
    if (from < to) {
      ForEachNormVectorSpan<T, W, kCastThenScale, kMayBeNaN>(d, from, to, inv, gamma, weight_offset,
                                                             load, load_partial, sink);
    }
  };
  if (!stream) {
    span(begin, end, store, std::false_type{});
    return;
  }
  const size_t vec_bytes = (pairs ? 2 : 1) * hn::MaxLanes(d) * sizeof(O);
  const size_t misalign = reinterpret_cast<uintptr_t>(y) % vec_bytes;
  const size_t head = std::min(width, misalign ? (vec_bytes - misalign) / sizeof(O) : 0);
  const size_t body_end = head + (width - head) / hn::MaxLanes(d) * hn::MaxLanes(d);
  const size_t from = begin == 0 ? 0 : std::min(width, begin + head);
  const size_t to = end == width ? width : std::min(width, end + head);
  span(from, std::min(to, head), store, std::false_type{});
  span(std::max(from, head), std::min(to, body_end), StoreSink<O, kMayBeNaN, true>{y},
       std::true_type{});
  span(std::max(from, body_end), to, store, std::false_type{});
}

// Whether rows of this width take the pair loops: PairsApply's rows, and
// with AVX512-BF16 also heads reduced in batches (RowBatches), whose rows
// then mostly take NormalizeNativePairs (the guarded pair loop alone lost
// 15-30% on heads of 128, docs/PERFORMANCE.md); on AVX2 every bf16 row
// (NormalizeAvx2Pairs).
template <typename T, typename W, typename O, bool kCastThenScale, class D>
HWY_INLINE bool RmsNormPairs(D d, size_t width, int64_t rows) {
  // PairsApply at a width it always serves: the types and the CPU.
  constexpr size_t kWide = 1024;
  return Avx2PairTypes<T, W, O, kCastThenScale, D>() ||
         PairsApply<T, W, O, kCastThenScale>(d, width) ||
         (PairsApply<T, W, O, kCastThenScale>(d, kWide) && RowBatches<T>(width, rows));
}

// Whether every row of y starts on a 64-byte line (the base and each
// leading stride in bytes a multiple of 64), so that streaming stores write
// whole lines.
HWY_INLINE bool RowsStartOnLines(const void* y, const RowLayout& rows, size_t elem_bytes) {
  if (reinterpret_cast<uintptr_t>(y) % 64 != 0) return false;
  for (int i = 0; i < rows.num_lead; ++i) {
    if (rows.stride[i] * static_cast<int64_t>(elem_bytes) % 64 != 0) return false;
  }
  return true;
}

// Rows [row_begin, row_end) with gamma already of type W (the job's, or
// widened to float32 by RmsNormRowsTyped).
template <typename T, typename W, typename O, bool kCastThenScale>
void RmsNormRowsWithGamma(const RmsNormJob& job, const W* HWY_RESTRICT gamma, int64_t row_begin,
                          int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  // A non-finite gamma can make y NaN from finite x: take the NaN-safe path.
  const bool gamma_finite = !FastPathNeedsFiniteGamma<T, O>(d) || AllFinite(d, gamma, width);
  // Streaming stores for outputs too large to stay cached. Rows narrower than
  // RowsInSpans' only when every row starts on a line: a row starting inside
  // one shares its first and last lines with its neighbours, written partly
  // by plain stores while streaming ones are pending, and f32 heads of 128
  // 16 bytes off a line ran 3.4x slower than aligned ones, 2.3x slower than
  // with plain stores (docs/PERFORMANCE.md, "Streaming stores need whole
  // lines"). Wide rows meet a shared line only at their ends.
  const bool stream = job.size.rows * job.p.width * int64_t{sizeof(O)} >= cpu::kStreamMinBytes &&
                      (RowsInSpans(width) || RowsStartOnLines(job.y, job.y_rows, sizeof(O)));
  const bool pairs = RmsNormPairs<T, W, O, kCastThenScale>(d, width, row_end - row_begin);
  // Pair rows may take NormalizeNativePairs where NativeRowOk says so.
  float gamma_min_abs = 0.0f;
#if GLMNORM_HAVE_BF16_PAIRS
  if constexpr (PairTypes<T, W, O, decltype(d)>()) {
    if (pairs) gamma_min_abs = MinNonzeroAbsOfGamma(gamma, width, job.p.weight_offset);
  }
#endif
  const auto x_of = [&](int64_t row) {
    return static_cast<const T*>(job.x) + job.x_rows.Offset(row);
  };
  const auto y_of = [&](int64_t row) { return static_cast<O*>(job.y) + job.y_rows.Offset(row); };
  const bool batches = RowBatches<T>(width, row_end - row_begin);
  // Wide rows of a job that fits in cache (its output does not stream): each
  // row reduced, then normalised from L1, with no look-ahead (below).
  const bool row_by_row = RowsInSpans(width) && !batches && !stream;
  // How far ahead to prefetch: none for row_by_row (`ahead` is the row
  // itself); row + 2 for other wide rows; narrow rows (heads of 128: 256
  // bytes) take as many rows as cover kPrefetchBytes, since two of them ahead
  // is less than one memory latency of work.
  int64_t prefetch_rows =
      row_by_row
          ? 0
          : std::max<int64_t>(2, cpu::kPrefetchBytes / std::max<int64_t>(1, job.p.width * sizeof(T)));
  // Values [begin, end) of row `row` given its 1/rms: y from x, prefetching
  // ahead.
  const auto normalize_span = [&](int64_t row, const InvRms& inv, size_t begin,
                                  size_t end) GLMNORM_INLINE_LAMBDA {
    const T* x = x_of(row);
    O* y = y_of(row);
    // This row is normalised from cache, with no read of memory in flight
    // unless we make one: prefetching row + 2, the next row the reduction
    // will read, keeps the read stream going (issue 16: 0.40 -> 0.59 of a
    // copy at 4096x5120 bf16). A line already requested costs nothing more.
    const T* ahead = x_of(std::min(row + prefetch_rows, row_end - 1));
    const auto load = [x, ahead](auto dd, size_t i) {
      hwy::Prefetch(ahead + i);
      return LoadF32(dd, x + i);
    };
    const auto load_partial = [x](auto dd, size_t i, size_t n) {
      return LoadF32Partial(dd, x + i, n);
    };
    if (begin == 0 && job.rstd != nullptr) job.rstd[row * job.rstd_stride] = inv.r * inv.prescale;
    const bool native = pairs && NativeRowOk(inv, gamma_min_abs);
    WithRowPath(FastPathOk(gamma_finite, inv), [&](auto may_be_nan) GLMNORM_INLINE_LAMBDA {
      NormalizeSpan<T, W, O, kCastThenScale, decltype(may_be_nan)::value>(
          d, width, begin, end, inv, gamma, job.p.weight_offset, x, ahead, y, stream, pairs, native,
          load, load_partial);
    });
  };
  const auto normalize = [&](int64_t row, const InvRms& inv)
                             GLMNORM_INLINE_LAMBDA { normalize_span(row, inv, 0, width); };
  // 1/rms row by row, the next row's ahead of this one's normalising, or of
  // 16 narrow rows at once (ForEachRowInvRms, row_batch-inl.h). A batch
  // reads its 16 rows in one burst: prefetch the whole next batch during
  // this one's normalising (f32 heads of 128: 8 KiB; 4 KiB ahead left its
  // second half to wait on memory, 1.15-1.4x slower).
  if (batches) prefetch_rows = std::max<int64_t>(prefetch_rows, kRowBatch);
#if GLMNORM_HAVE_ROW_BATCH && GLMNORM_HAVE_BF16_PAIRS
  if constexpr (PairTypes<T, W, O, decltype(d)>() && kCastThenScale) {
    if (batches && pairs && width <= kNativeRowsMaxWidth) {
      // Heads: a batch whose rows NativeRowOk all admits is normalised in
      // one loop, gamma split once per call (NormalizeNativeRows); any
      // other batch row by row. Same bits either way.
      HWY_ALIGN float split_gamma[kNativeRowsMaxWidth];
      SplitNativeGamma(gamma, width, job.p.weight_offset, split_gamma);
      const auto finish_batch = [&](int64_t base, size_t n,
                                    const InvRms* inv) GLMNORM_INLINE_LAMBDA {
        const auto row_of = [&](size_t j) {
          const int64_t row = base + static_cast<int64_t>(j);
          return NativeRow{x_of(row), y_of(row), x_of(std::min(row + prefetch_rows, row_end - 1))};
        };
        if (NormalizeNativeRowsIfOk<kRowBatch>(width, n, inv, gamma_finite, gamma_min_abs,
                                               split_gamma, stream, row_of)) {
          if (job.rstd != nullptr) {  // prescale is 1 on these rows (FastPathOk)
            for (size_t j = 0; j < n; ++j) {
              job.rstd[(base + static_cast<int64_t>(j)) * job.rstd_stride] = inv[j].r;
            }
          }
          return;
        }
        for (size_t j = 0; j < n; ++j) normalize(base + static_cast<int64_t>(j), inv[j]);
      };
      ForEachRowBatchInvRms<T>(width, job.p.eps, row_begin, row_end, x_of, finish_batch);
      if (stream) hwy::FlushStream();
      return;
    }
  }
#endif
  // Wide rows from memory: the next row's reduction block by block between
  // this row's spans (ForEachRowInSpans), which keeps the read stream going.
  // From cache, that look-ahead (and the prefetch of row + 2) brought the
  // next rows into L1 over the row being normalised: f32 rows of 5120 (20
  // KiB each; 32-48 KiB of L1) ran 1.15-1.35x slower than row by row, bf16
  // 1.04-1.11x (docs/PERFORMANCE.md, "Wide rows in cache"). Same bits either way.
  if (row_by_row) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      normalize(row, RowInverseRmsOf(d, width, job.p.eps, x_of(row)));
    }
  } else if (RowsInSpans(width) && !batches) {
    ForEachRowInSpans<T>(d, width, job.p.eps, row_begin, row_end, x_of, normalize_span);
  } else {
    ForEachRowInvRms<T>(d, width, job.p.eps, row_begin, row_end, x_of, normalize);
  }
  if (stream) hwy::FlushStream();
}

// Several rows per call: gamma widened once (WithWideGamma, norm_row-inl.h).
template <typename T, typename W, typename O, bool kCastThenScale>
void RmsNormRowsTyped(const RmsNormJob& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  // The pair loop splits a bf16 gamma as cheaply as it splits x: no widening.
  const size_t width = static_cast<size_t>(job.p.width);
  const bool widen = row_end - row_begin >= 4 &&
                     !RmsNormPairs<T, W, O, kCastThenScale>(d, width, row_end - row_begin);
  WithWideGamma(d, static_cast<const W*>(job.gamma), width, widen, [&](const auto* gamma) {
    using G = std::remove_cv_t<std::remove_pointer_t<decltype(gamma)>>;
    RmsNormRowsWithGamma<T, G, O, kCastThenScale>(job, gamma, row_begin, row_end);
  });
}

// Calls F<T, W, O, kCastThenScale>::Run(args...) for the runtime dtypes.
// Instantiates only the defined outputs: O = Promote(W, T) in
// cast-then-scale mode, O = T or f32 in single-rounding mode. The front end
// has already rejected everything else.
template <template <typename, typename, typename, bool> class F, typename... Args>
HWY_INLINE void DispatchTypes(const NormParams& p, Args&&... args) {
  const auto with_types = [&](auto t_tag, auto w_tag) {
    using T = typename decltype(t_tag)::type;
    using W = typename decltype(w_tag)::type;
    if (p.rounding == Rounding::kCastThenScale) {
      F<T, W, PromotedT<W, T>, true>::Run(args...);
    } else if (p.y_type == DType::kF32) {
      F<T, W, float, false>::Run(args...);
    } else {
      F<T, W, T, false>::Run(args...);
    }
  };
  WithFloatType(p.x_type, [&](auto t_tag) {
    WithFloatType(p.w_type, [&](auto w_tag) { with_types(t_tag, w_tag); });
  });
}

template <typename T, typename W, typename O, bool kCastThenScale>
struct RmsNormRowsFn {
  static void Run(const RmsNormJob& job, int64_t row_begin, int64_t row_end) {
    RmsNormRowsTyped<T, W, O, kCastThenScale>(job, row_begin, row_end);
  }
};

void RmsNormRows(const RmsNormJob& job, int64_t row_begin, int64_t row_end) {
  DispatchTypes<RmsNormRowsFn>(job.p, job, row_begin, row_end);
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glmnorm {
HWY_EXPORT(RmsNormRows);
void OpKernels<RmsNormJob>::CpuRows(const RmsNormJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(RmsNormRows)(job, row_begin, row_end);
}
}  // namespace glmnorm
#endif  // HWY_ONCE
