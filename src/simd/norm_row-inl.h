// The row op sequence of every norm kernel, compiled once per SIMD target
// (each op's <op>_cpu.cc includes it through foreach_target.h).
//
// ForEachNormVector computes exactly the float32 operations of RmsNorm's
// NormalizeRow (rms_norm-inl.h): h = (x * prescale) * r, then
//   cast-then-scale: (gamma + offset) * RoundTo<T>(h);  single: h * (gamma + offset)
// and hands each vector of y values (float32, before the output rounding)
// to a sink, so the same y can be stored, quantised or rotated. Explicit Mul
// then Add everywhere (never MulAdd): every target gives the same bits.

#if defined(GLMNORM_SRC_NORM_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_NORM_ROW_INL_H_
#undef GLMNORM_SRC_NORM_ROW_INL_H_
#else
#define GLMNORM_SRC_NORM_ROW_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/job.h"
#include "simd/convert-inl.h"
#include "simd/reduction-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

// Calls fn(std::type_identity<T>{}) for a float activation dtype.
template <class Fn>
HWY_INLINE void WithFloatType(DType t, const Fn& fn) {
  switch (t) {
    case DType::kBF16:
      return fn(std::type_identity<BF16>{});
    case DType::kF16:
      return fn(std::type_identity<F16>{});
    default:
      return fn(std::type_identity<float>{});
  }
}

// The element type of Promote(W, T) (the cast-then-scale output dtype).
template <typename W, typename T>
using PromotedT = std::conditional_t<std::is_same_v<W, T>, T, float>;

// sink(d, i, n, y): y holds the y values i .. i+n-1 (n == Lanes, or fewer at
// the end of the span; lanes >= n are then meaningless) for i in [begin, end).
// load(d, i) and load_partial(d, i, n) are called exactly once per index, in
// order, so a loader may have side effects (AddRmsNorm stores the residual
// there).
// kMayBeNaN false is the fast path, for rows where the caller knows that no
// lane of x*r is NaN and prescale is 1; true is the general path (NaN-safe
// rounding, rescaled rows). Both compute the same bits where both apply.
template <typename T, typename W, bool kCastThenScale, bool kMayBeNaN, class D, class Load,
          class LoadPartial, class Sink>
HWY_INLINE void ForEachNormVectorSpan(D d, size_t begin, size_t end, InvRms inv,
                                      const W* HWY_RESTRICT gamma, float weight_offset,
                                      const Load& load, const LoadPartial& load_partial,
                                      const Sink& sink) {
  constexpr size_t N = hn::MaxLanes(d);
  const auto vr = hn::Set(d, inv.r);
  const auto vpre = hn::Set(d, inv.prescale);
  const bool has_prescale = inv.prescale != 1.0f;
  const auto voff = hn::Set(d, weight_offset);
  const bool has_offset = weight_offset != 0.0f;
  // A row holding NaN has r = its NaN (RowNaN, reduction-inl.h), which every
  // y of the row gets, whatever x and gamma hold (docs/SPEC.md §10): x * r
  // and g * h would keep one NaN operand or the other depending on the
  // compiler's operand order. Elsewhere a NaN h (inf * 0) wins over a NaN
  // gamma, for the same reason.
  const bool nan_row = kMayBeNaN && std::isnan(inv.r);
  const auto value = [&](hn::Vec<D> xv, hn::Vec<D> g) {
    if constexpr (kMayBeNaN) {
      if (HWY_UNLIKELY(nan_row)) {
        if constexpr (kCastThenScale) {
          return RoundTo<T, true>(d, vr);
        } else {
          return vr;
        }
      }
    }
    // The offset is added only when non-zero, so a -0 gamma keeps its sign.
    if (has_offset) g = hn::Add(g, voff);
    if constexpr (kMayBeNaN) {
      if (has_prescale) xv = hn::Mul(xv, vpre);
    }
    auto h = hn::Mul(xv, vr);
    if constexpr (kCastThenScale) h = RoundTo<T, kMayBeNaN>(d, h);
    const auto y = kCastThenScale ? hn::Mul(g, h) : hn::Mul(h, g);
    if constexpr (kMayBeNaN) {
      return hn::IfThenElse(hn::IsNaN(h), h, y);
    } else {
      return y;
    }
  };
  size_t i = begin;
  // Two vectors per iteration halve the loop's scalar overhead (a third of
  // its instructions with bf16 data).
#pragma GCC unroll 2
  for (; i + N <= end; i += N) {
    const auto g = LoadF32(d, gamma + i);
    const auto xv = load(d, i);
    sink(d, i, N, value(xv, g));
  }
  if (i < end) {
    const size_t n = end - i;
    const auto g = LoadF32Partial(d, gamma + i, n);
    const auto xv = load_partial(d, i, n);
    sink(d, i, n, value(xv, g));
  }
}

// The whole row on the general path.
template <typename T, typename W, bool kCastThenScale, class D, class Load, class LoadPartial,
          class Sink>
HWY_INLINE void ForEachNormVector(D d, size_t width, InvRms inv, const W* HWY_RESTRICT gamma,
                                  float weight_offset, const Load& load,
                                  const LoadPartial& load_partial, const Sink& sink) {
  ForEachNormVectorSpan<T, W, kCastThenScale, true>(d, 0, width, inv, gamma, weight_offset, load,
                                                    load_partial, sink);
}

// Whether the fast path's bits depend on knowing that no lane is NaN, so
// that a non-finite gamma must be ruled out by a scan first: only the
// portable bf16 rounding's do (RoundedBF16BitsNoNaN). f32 and f16 values,
// and the native bf16 conversion, round NaN the same on both paths, so the
// per-call scan over gamma is skipped for them (it costs as much as a decode
// row).
template <typename T, typename O, class D>
HWY_INLINE bool FastPathNeedsFiniteGamma(D d) {
  (void)d;
  if constexpr (!std::is_same_v<T, BF16> && !std::is_same_v<O, BF16>) {
    return false;
  } else {
#if GLMNORM_HAVE_NATIVE_BF16
    if constexpr (hn::MaxLanes(d) == 16) {
      if (g_native_bf16) return false;
    }
#endif
    return true;
  }
}

// Whether a row may take the fast path of ForEachNormVectorSpan: gamma and
// the row are finite (so x*r and y have no NaN) and the row needed no
// rescaling.
HWY_INLINE bool FastPathOk(bool gamma_finite, const InvRms& inv) {
  return gamma_finite && inv.finite_row && std::isfinite(inv.r) && inv.prescale == 1.0f;
}

// body(std::false_type) on the fast path, body(std::true_type) otherwise:
// the argument is kMayBeNaN as a type.
template <class Body>
HWY_INLINE void WithRowPath(bool fast, const Body& body) {
  if (HWY_LIKELY(fast)) {
    body(std::false_type{});
  } else {
    body(std::true_type{});
  }
}

// Stores y vectors rounded to O. kMayBeNaN false: no lane of y is NaN
// (faster bf16 rounding). kStream: whole vectors go to aligned addresses
// with non-temporal stores.
template <typename O, bool kMayBeNaN = true, bool kStream = false>
struct StoreSink {
  O* y;
  bool native_bf16 = g_native_bf16;  // read once per span, not once per vector
  template <class D>
  HWY_INLINE void operator()(D d, size_t i, size_t n, hn::Vec<D> v) const {
    if (n == hn::MaxLanes(d)) {
      StoreF32AsWith<kMayBeNaN, kStream>(d, v, y + i, native_bf16);
    } else {
      StoreF32AsPartial(d, v, y + i, n);
    }
  }
};

// Whether rows of these types and width take the 32-value loops
// (Bf16Pairs, convert-inl.h): bf16 in and out with a bf16 gamma,
// cast-then-scale (GLM-4.5's norms), on a CPU with AVX512-BF16 (the pair
// store's conversion), rows of 1024 values or more (hidden rows: heads of
// 128 lost 15-30% with them, Zen 4: each row pays the loop's setup, and
// they lose the float32 gamma of WithWideGamma). Such rows keep gamma as
// bf16: splitting it costs as little as splitting x. PairTypes: the types
// the pair loops are written for (NormalizePairs), on AVX-512 targets.
template <typename T, typename W, typename O, class D>
constexpr bool PairTypes() {
#if GLMNORM_HAVE_BF16_PAIRS
  return std::is_same_v<T, BF16> && std::is_same_v<W, BF16> && std::is_same_v<O, BF16> &&
         hn::MaxLanes(D()) == 16;
#else
  return false;
#endif
}

template <typename T, typename W, typename O, bool kCastThenScale, class D>
HWY_INLINE bool PairsApply(D d, size_t width) {
  (void)d, (void)width;
#if GLMNORM_HAVE_BF16_PAIRS
  if constexpr (PairTypes<T, W, O, D>() && kCastThenScale) {
    return g_native_bf16 && width >= 1024;
  }
#endif
  return false;
}

// store(i, load(i)) for the whole 32-value blocks of [begin, end), each
// block's loads issued before the previous block's store: in the plain
// order, a load of x or gamma whose low 12 address bits matched the previous
// store's ("4K aliasing") waited, when y lay 16-96 bytes past x modulo
// 4 KiB: up to 2.2x slower (docs/PERFORMANCE.md, "Where the output lies").
// Returns where it stopped: fewer than 32 values before end.
template <class Load, class Store>
HWY_INLINE size_t ForEachBlockOneAhead(size_t begin, size_t end, const Load& load,
                                       const Store& store) {
  size_t i = begin;
  if (i + 32 > end) return i;
  auto loaded = load(i);
  for (; i + 64 <= end; i += 32) {
    const auto next = load(i + 32);
    store(i, loaded);
    loaded = next;
  }
  store(i, loaded);  // the last whole block
  return i + 32;
}

// ForEachNormVectorSpan's fast path (kMayBeNaN false) and a StoreSink, 32
// values at a time, for PairsApply's rows: y = (gamma + offset) * bf16(x *
// r), the same float32 operations on each element. Returns where it
// stopped: the caller does the last values (fewer than 32). The line at
// ahead + i (and ahead2 + i) is prefetched once per 32 values. The prefetch
// is written here, not passed in as a functor: GCC deleted the calls of a
// lambda that only prefetched (it has no visible effect). For other types
// it does nothing and returns begin.
template <bool kStream, class D, typename T, typename W, typename O>
HWY_INLINE size_t NormalizePairs(D d, size_t begin, size_t end, float r, const T* x, const W* gamma,
                                 float weight_offset, O* y, const T* ahead,
                                 const T* ahead2 = nullptr) {
  size_t i = begin;
#if GLMNORM_HAVE_BF16_PAIRS
  if constexpr (PairTypes<T, W, O, D>()) {
    const auto vr = hn::Set(d, r);
    const auto voff = hn::Set(d, weight_offset);
    const bool has_offset = weight_offset != 0.0f;
    const auto value = [&](__m512 xv, __m512 gv) {
      auto g = hn::Vec<D>{gv};
      if (has_offset) g = hn::Add(g, voff);  // only when non-zero: -0 keeps its sign
      const auto h = RoundTo<BF16, false>(d, hn::Mul(hn::Vec<D>{xv}, vr));
      return hn::Mul(g, h).raw;
    };
    const auto load = [&](size_t at) GLMNORM_INLINE_LAMBDA {
      return std::pair{LoadBf16Pairs(x + at), LoadBf16Pairs(gamma + at)};
    };
    // The block at `at` from its loaded x and gamma, with the prefetches.
    const auto store = [&](size_t at, const auto& loaded) GLMNORM_INLINE_LAMBDA {
      hwy::Prefetch(ahead + at);
      if (ahead2 != nullptr) hwy::Prefetch(ahead2 + at);
      const Bf16Pairs& xv = loaded.first;
      const Bf16Pairs& gv = loaded.second;
      StoreBf16Pairs<kStream>({value(xv.even, gv.even), value(xv.odd, gv.odd)}, y + at);
    };
    i = ForEachBlockOneAhead(i, end, load, store);
  }
#endif
  (void)d, (void)end, (void)r, (void)x, (void)gamma, (void)weight_offset, (void)y, (void)ahead,
      (void)ahead2;
  return i;
}

// Whether rows of these types take NormalizeAvx2Pairs: bf16 in and out
// with a bf16 gamma, cast-then-scale, on the AVX2 target (every width).
template <typename T, typename W, typename O, bool kCastThenScale, class D>
constexpr bool Avx2PairTypes() {
#if GLMNORM_HAVE_SQUARE_PAIRS && !GLMNORM_HAVE_BF16_PAIRS
  return std::is_same_v<T, BF16> && std::is_same_v<W, BF16> && std::is_same_v<O, BF16> &&
         kCastThenScale && hn::MaxLanes(D()) == 8;
#else
  return false;
#endif
}

// ForEachNormVectorSpan's fast path (kMayBeNaN false) and a StoreSink for
// Avx2PairTypes rows, 16 values per step in the pair layout (LoadBf16Pairs,
// convert-inl.h): y = (gamma + offset) * bf16(x * r), the same float32
// operations on each element, without the widening shifts and the
// narrowing pack and permute of the 8-value loop (Zen 1: 2 cycles each on
// one pipe). Returns where it stopped (fewer than 16 values before end);
// for other types it does nothing and returns begin. kStream: y + begin is
// 32-byte aligned.
template <bool kStream, class D, typename T, typename W, typename O>
HWY_INLINE size_t NormalizeAvx2Pairs(D d, size_t begin, size_t end, float r, const T* x,
                                     const W* gamma, float weight_offset, O* y, const T* ahead) {
  size_t i = begin;
#if GLMNORM_HAVE_SQUARE_PAIRS && !GLMNORM_HAVE_BF16_PAIRS
  if constexpr (Avx2PairTypes<T, W, O, true, D>()) {
    using V = hn::Vec<D>;
    const V vr = hn::Set(d, r);
    const V voff = hn::Set(d, weight_offset);
    // The offset as a type: GCC kept its test inside the loop, a compare
    // and branch per 8 values.
    const auto loop = [&](auto has_offset) GLMNORM_INLINE_LAMBDA {
      const auto value = [&](__m256 xv, __m256 gv) GLMNORM_INLINE_LAMBDA {
        V g{gv};
        // Added only when non-zero: -0 keeps its sign.
        if constexpr (decltype(has_offset)::value) g = hn::Add(g, voff);
        const V h = RoundTo<BF16, false>(d, hn::Mul(V{xv}, vr));
        return hn::Mul(g, h).raw;
      };
      for (; i + 16 <= end; i += 16) {
        // One prefetch per 64-byte line of the row ahead.
        if (i % 32 == begin % 32) hwy::Prefetch(ahead + i);
        const Bf16Pairs xv = LoadBf16Pairs(x + i);
        const Bf16Pairs gv = LoadBf16Pairs(gamma + i);
        StoreBf16PairsNoNaN<kStream>({value(xv.even, gv.even), value(xv.odd, gv.odd)}, y + i);
      }
    };
    if (weight_offset != 0.0f) {
      loop(std::true_type{});
    } else {
      loop(std::false_type{});
    }
  }
#endif
  (void)d, (void)end, (void)r, (void)x, (void)gamma, (void)weight_offset, (void)y, (void)ahead;
  return i;
}

// Whether a fast-path row (FastPathOk) may take NormalizeNativePairs: every
// nonzero h = x * r and y = gamma * bf16(h) is at least 2^-125, so normal
// whatever the roundings (bf16(h) >= h / 2), and the native conversions,
// which flush subnormals, flush nothing. inv.min_abs is 0 where unknown;
// gamma_min_abs: MinNonzeroAbsOfGamma (convert-inl.h).
HWY_INLINE bool NativeRowOk(const InvRms& inv, float gamma_min_abs) {
  const double h_min = static_cast<double>(inv.min_abs) * inv.r;
  return inv.min_abs > 0.0f && h_min >= 0x1p-125 && h_min * gamma_min_abs >= 0x1p-124;
}

#if GLMNORM_HAVE_BF16_PAIRS
// gamma + offset of one 32-value block (32 bf16 words) in the lanes of
// NativeBlock: float32 A and B (kNativeOrder). The offset is added only when
// non-zero: -0 keeps its sign.
struct NativeGamma {
  __m512i to_a = _mm512_loadu_si512(kNativeOrder.gamma_a);
  __m512i to_b = _mm512_loadu_si512(kNativeOrder.gamma_b);
  __m512 offset;
  bool has_offset;
  explicit NativeGamma(float weight_offset)
      : offset(_mm512_set1_ps(weight_offset)), has_offset(weight_offset != 0.0f) {}
  HWY_INLINE void Split(__m512i g, __m512* a, __m512* b) const {
    const __m512i zero = _mm512_setzero_si512();
    *a = _mm512_castsi512_ps(_mm512_permutex2var_epi16(g, to_a, zero));
    *b = _mm512_castsi512_ps(_mm512_permutex2var_epi16(g, to_b, zero));
    if (has_offset) {
      *a = _mm512_add_ps(*a, offset);
      *b = _mm512_add_ps(*b, offset);
    }
  }
};

// One 32-value block of a NativeRowOk row: h = x * r rounded by one
// VCVTNE2PS2BF16 and widened back by two word unpacks (lanes A and B of
// kNativeOrder), times gamma in those lanes, y rounded by another
// VCVTNE2PS2BF16 and put back in memory order by one word permute.
HWY_INLINE __m512i NativeBlock(const Bf16Pairs& xv, __m512 vr, __m512 g_a, __m512 g_b,
                               __m512i to_memory) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i h = PackBf16(_mm512_mul_ps(xv.odd, vr), _mm512_mul_ps(xv.even, vr));
  const __m512 h_a = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, h));
  const __m512 h_b = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, h));
  const __m512i packed = PackBf16(_mm512_mul_ps(g_b, h_b), _mm512_mul_ps(g_a, h_a));
  return _mm512_permutexvar_epi16(to_memory, packed);
}

template <bool kStream>
HWY_INLINE void StoreNativeBlock(__m512i out, BF16* y) {
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(y), out);
  } else {
    _mm512_storeu_si512(y, out);
  }
}
#endif  // GLMNORM_HAVE_BF16_PAIRS

// NormalizePairs for a row that NativeRowOk admits, 32 values per
// NativeBlock, gamma split into its lanes in the loop (NativeGamma). The
// same float32 operations on each element as NormalizePairs, with a third
// fewer vector instructions (issue 16). Returns where it stopped (the
// caller does the last values, fewer than 32); for other types it does
// nothing.
template <bool kStream, class D, typename T, typename W, typename O>
HWY_INLINE size_t NormalizeNativePairs(D d, size_t begin, size_t end, float r, const T* x,
                                       const W* gamma, float weight_offset, O* y, const T* ahead) {
  size_t i = begin;
#if GLMNORM_HAVE_BF16_PAIRS
  if constexpr (PairTypes<T, W, O, D>()) {
    const __m512 vr = _mm512_set1_ps(r);
    const NativeGamma split(weight_offset);
    const __m512i to_memory = _mm512_loadu_si512(kNativeOrder.packed_word);
    const auto load = [&](size_t at) GLMNORM_INLINE_LAMBDA {
      return std::pair{LoadBf16Pairs(x + at), _mm512_loadu_si512(gamma + at)};
    };
    const auto store = [&](size_t at, const auto& loaded) GLMNORM_INLINE_LAMBDA {
      hwy::Prefetch(ahead + at);
      __m512 g_a, g_b;
      split.Split(loaded.second, &g_a, &g_b);
      StoreNativeBlock<kStream>(NativeBlock(loaded.first, vr, g_a, g_b, to_memory), y + at);
    };
    i = ForEachBlockOneAhead(i, end, load, store);
  }
#endif
  (void)d, (void)end, (void)r, (void)x, (void)gamma, (void)weight_offset, (void)y, (void)ahead;
  return i;
}

#if GLMNORM_HAVE_BF16_PAIRS
// NormalizeNativeRows serves rows up to this width (RowBatches' heads).
constexpr size_t kNativeRowsMaxWidth = 512;

// gamma + offset of `width` bf16 values (a multiple of 32, at most
// kNativeRowsMaxWidth) split as NativeGamma does, 32 float32 per block (A
// then B), for NormalizeNativeRows.
HWY_INLINE void SplitNativeGamma(const BF16* gamma, size_t width, float weight_offset,
                                 float* split_gamma) {
  const NativeGamma split(weight_offset);
  for (size_t i = 0; i + 32 <= width; i += 32) {
    __m512 a, b;
    split.Split(_mm512_loadu_si512(gamma + i), &a, &b);
    _mm512_storeu_ps(split_gamma + i, a);
    _mm512_storeu_ps(split_gamma + i + 16, b);
  }
}

// NormalizeNativePairs over n >= 1 rows (x[j], y[j], r[j]) of `width`
// values, a multiple of 32, that NativeRowOk admits, with gamma split once
// for all of them (SplitNativeGamma). One loop without per-row setup: a head
// of 128 is 4 blocks, and the setup and permutes of gamma cost about as much
// again (issue 16). Prefetches each line of ahead[j]. With kStream every
// y[j] is 64-byte aligned. Rows do not overlap (y[j] may be x[j]).
template <bool kStream>
HWY_INLINE void NormalizeNativeRows(size_t width, size_t n, const BF16* const* x, BF16* const* y,
                                    const float* r, const float* HWY_RESTRICT split_gamma,
                                    const BF16* const* ahead) {
  const __m512i to_memory = _mm512_loadu_si512(kNativeOrder.packed_word);
  // One block ahead, as in ForEachBlockOneAhead (4K aliasing), across rows too:
  // the block after a row's last is the next row's first (for the last row,
  // its own first again, unused).
  Bf16Pairs xv = LoadBf16Pairs(x[0]);
  for (size_t j = 0; j < n; ++j) {
    const __m512 vr = _mm512_set1_ps(r[j]);
    const BF16* next_row = x[j + 1 < n ? j + 1 : j];
    for (size_t i = 0; i < width; i += 32) {
      const Bf16Pairs x_next = LoadBf16Pairs(i + 32 < width ? x[j] + i + 32 : next_row);
      hwy::Prefetch(ahead[j] + i);
      const __m512i out = NativeBlock(xv, vr, _mm512_loadu_ps(split_gamma + i),
                                      _mm512_loadu_ps(split_gamma + i + 16), to_memory);
      StoreNativeBlock<kStream>(out, y[j] + i);
      xv = x_next;
    }
  }
}

// One row of NormalizeNativeRowsIfOk: where it is read and written, and the
// line to prefetch for a later row.
struct NativeRow {
  const BF16* x;
  BF16* y;
  const BF16* ahead;
};

// Rows j < n (row_of(j) a NativeRow, inv[j] its 1/rms) normalised together
// by NormalizeNativeRows when every one is a FastPathOk row that NativeRowOk
// admits and, with `stream`, has a 64-byte aligned y (streaming stores).
// Returns whether they were; if not, nothing was written. n <= kMaxRows.
template <size_t kMaxRows, class RowOf>
HWY_INLINE bool NormalizeNativeRowsIfOk(size_t width, size_t n, const InvRms* inv,
                                        bool gamma_finite, float gamma_min_abs,
                                        const float* split_gamma, bool stream,
                                        const RowOf& row_of) {
  if (n == 0) return true;
  const BF16* x[kMaxRows];
  BF16* y[kMaxRows];
  const BF16* ahead[kMaxRows];
  float r[kMaxRows];
  // Without a branch per row: NativeRowOk once, for the smallest r and the
  // smallest min_abs, implies it for every row (the bound grows with both;
  // a batch's rows share min_abs, InvRmsOfRows).
  bool fast = true, aligned = true;
  InvRms least{std::numeric_limits<float>::infinity(), 1.0f, true,
               std::numeric_limits<float>::infinity()};
  for (size_t j = 0; j < n; ++j) {
    fast &= FastPathOk(gamma_finite, inv[j]);
    least.r = std::min(least.r, inv[j].r);
    least.min_abs = std::min(least.min_abs, inv[j].min_abs);
    const NativeRow row = row_of(j);
    aligned &= reinterpret_cast<uintptr_t>(row.y) % 64 == 0;
    x[j] = row.x;
    y[j] = row.y;
    ahead[j] = row.ahead;
    r[j] = inv[j].r;
  }
  if (!fast || (stream && !aligned) || !NativeRowOk(least, gamma_min_abs)) return false;
  if (stream) {
    NormalizeNativeRows<true>(width, n, x, y, r, split_gamma, ahead);
  } else {
    NormalizeNativeRows<false>(width, n, x, y, r, split_gamma, ahead);
  }
  return true;
}
#endif  // GLMNORM_HAVE_BF16_PAIRS

// Gammas of rows up to this width may be widened to float32 once per call
// (a stack buffer of 32 KiB): the row loops then multiply by a float32
// operand from memory instead of widening gamma again for every row, which
// is two of the ~12 vector instructions per bf16 vector of the row loop.
// Widening is exact, so the bits do not change.
constexpr size_t kWideGammaMax = 8192;

// body(g) with g the n gamma values as float32 (widened into a stack buffer
// when `worth_it`, W is 16-bit and n <= kMax), else body(gamma) as it is.
// The caller decides whether the widening pays off (several rows).
template <size_t kMax = kWideGammaMax, typename W, class D, class Body>
HWY_INLINE void WithWideGamma(D d, const W* gamma, size_t n, bool worth_it, const Body& body) {
  if constexpr (!std::is_same_v<W, float>) {
    if (worth_it && n <= kMax) {
      // kMax is a multiple of the vector length: whole-vector stores fit.
      static_assert(kMax % hn::MaxLanes(d) == 0);
      HWY_ALIGN float wide[kMax];
      constexpr size_t N = hn::MaxLanes(d);
      size_t i = 0;
      for (; i + N <= n; i += N) hn::Store(LoadF32(d, gamma + i), d, wide + i);
      if (i < n) hn::Store(LoadF32Partial(d, gamma + i, n - i), d, wide + i);
      body(static_cast<const float*>(wide));
      return;
    }
  }
  body(gamma);
}

// Calls fn(std::type_identity<W>{}) for the gamma of a decoder-path kernel:
// f32 or the activation type A (the front ends reject other gammas; this
// keeps the per-target instantiations, and the build time, down).
template <typename A, class Fn>
HWY_INLINE void WithQuantGammaType(DType w, const Fn& fn) {
  if (w == DType::kF32) return fn(std::type_identity<float>{});
  return fn(std::type_identity<A>{});
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
