// The canonical reduction (docs/ACCURACY.md) and 1/rms of a row, with the
// rescaling path for rows whose float32 squares overflow or underflow.
// Compiled once per SIMD target, like convert-inl.h.

// Per-target include guard (Highway's pattern).
#if defined(GLMNORM_SRC_SIMD_REDUCTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_REDUCTION_INL_H_
#undef GLMNORM_SRC_SIMD_REDUCTION_INL_H_
#else
#define GLMNORM_SRC_SIMD_REDUCTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "simd/convert-inl.h"

// Forces a lambda inline where GCC would call it: a row loop's per-span
// lambdas, whose call would stop the out-of-order overlap of one row's
// normalising with the next row's reduction (norm_row-inl.h), or a block's
// terms (BlockOfSquarePairs).
#ifndef GLMNORM_INLINE_LAMBDA
#define GLMNORM_INLINE_LAMBDA __attribute__((always_inline))
#endif

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The canonical reduction order (docs/ACCURACY.md): element i of a row goes to
// virtual lane i % kVirtualLanes; each lane sums kBlockChunks chunks into a
// block sum, block sums are added to the lane total in sequence, and the
// 64 lane totals are added as a binary tree (lane l += lane l + s, s = 32..1).
// Every target computes exactly these float32 operations.
constexpr size_t kVirtualLanes = 64;
constexpr size_t kBlockChunks = 8;

// ---------------------------------------------------------------- reduction

// Adds the lanes of v as a binary tree: lane l += lane l + Lanes/2, halving
// until one lane is left; the same pairing as the canonical 64-lane tree.
template <class D>
HWY_INLINE float TreeSumOfLanes(D d, hn::Vec<D> v) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  return hn::GetLane(v);
#else
  if constexpr (hn::MaxLanes(d) == 1) {
    return hn::GetLane(v);
  } else {
    const hn::Half<D> dh;
    return TreeSumOfLanes(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
#endif
}

// The terms of a sum of squares: Squares(load)(d, i) is load(d, i)^2, and
// Squares(load_partial)(d, i, n) the same for a partial load.
template <class Load>
HWY_INLINE auto Squares(const Load& load) {
  return [&load](auto d, size_t i, auto... n) {
    const auto v = load(d, i, n...);
    return hn::Mul(v, v);
  };
}

// Whether the whole blocks of a row of T sum squares of bf16 values loaded
// two per float32 lane (CanonicalSumSteps<D, true>): bf16 rows on AVX-512
// targets (32 values per load) and on AVX2 (16).
template <typename T, class D>
constexpr bool SquarePairsFor() {
#if GLMNORM_HAVE_SQUARE_PAIRS
  return std::is_same_v<T, hwy::bfloat16_t> &&
         hn::MaxLanes(D()) * sizeof(float) == sizeof(Bf16Pairs::even);
#else
  return false;
#endif
}

// The canonical sum (docs/ACCURACY.md) in steps, so that a row loop can add
// one block of a row at a time between other work (ForEachRowInSpans,
// row_batch-inl.h): Block() for each whole block from the row's start, then
// Finish() for the rest. CanonicalSum below is exactly these steps.
// term(d, i) returns the terms i .. i+Lanes-1, term_partial(d, i, n) the n
// terms from i with zeros after them; each index is visited once, in
// increasing order.
//
// kPairs: the whole blocks are squares of bf16 values loaded 32 at a time
// (BlockOfSquarePairs), which keeps the lanes in another register order
// until Finish. It is a type, not a flag: a sum that mixed Block and
// BlockOfSquarePairs would get the wrong bits, so the two do not compile on
// one sum. SquarePairsFor<T, D>() says which layout a row of T takes.
template <class D, bool kPairs = false>
struct CanonicalSumSteps {
  using V = hn::Vec<D>;
  static constexpr size_t N = hn::MaxLanes(D());
  static_assert(kVirtualLanes % N == 0, "vector wider than the virtual lanes");
  static_assert(!kPairs || GLMNORM_HAVE_SQUARE_PAIRS, "no pair layout on this target");
  static constexpr size_t K = kVirtualLanes / N;
  static constexpr size_t kBlock = kVirtualLanes * kBlockChunks;
  V total[K];
#if GLMNORM_HAVE_BF16_PAIRS
  // Pair layout only: whether the blocks of squares take VDPBF16PS
  // (NativeBlockOfSquares), and the smallest nonzero |x| they saw
  // (MinNonzeroBits, convert-inl.h).
  bool native = false;
  __m512i min_bits = _mm512_set1_epi32(-1);
#endif

  // native_blocks: the pair layout's blocks take VDPBF16PS (callers pass
  // NativeBlocks(), true only with AVX512-BF16).
  explicit CanonicalSumSteps(D d, bool native_blocks = false) {
    for (size_t k = 0; k < K; ++k) total[k] = hn::Zero(d);
#if GLMNORM_HAVE_BF16_PAIRS
    native = kPairs && native_blocks;
#else
    (void)native_blocks;
#endif
  }

  // The whole block of kBlock terms at `base`.
  template <class Term>
  HWY_INLINE void Block(D d, size_t base, const Term& term) {
    static_assert(!kPairs, "a sum in the pair layout takes BlockOfSquarePairs only");
    V block[K];
    for (size_t k = 0; k < K; ++k) block[k] = hn::Zero(d);
    for (size_t c = 0; c < kBlockChunks; ++c) {
      for (size_t k = 0; k < K; ++k) {
        block[k] = hn::Add(block[k], term(d, base + c * kVirtualLanes + k * N));
      }
    }
    for (size_t k = 0; k < K; ++k) total[k] = hn::Add(total[k], block[k]);
  }

#if GLMNORM_HAVE_SQUARE_PAIRS
  // Block(d, base, Squares(load)) with 2N values per call of pairs(i), which
  // returns the values i .. i + 2N - 1 as Bf16Pairs (convert-inl.h), each
  // index once, in order. Each virtual lane gets the same terms in the same
  // order, held in another register order until Finish: total[0] holds
  // virtual lanes 0, 2, ..., 2N - 2, total[1] 1, 3, ..., 2N - 1, total[2]
  // and total[3] the same from 2N, and so on. Every block of a sum then goes
  // through here.
  template <class Pairs>
  HWY_INLINE void BlockOfSquarePairs(D d, size_t base, const Pairs& pairs) {
    BlockOfPairs(d, base, SquaresOfPairs(pairs));
  }

  // The terms of a sum of squares in the pair layout: SquaresOfPairs(pairs)(i)
  // is pairs(i) with each lane squared.
  template <class Pairs>
  static HWY_INLINE auto SquaresOfPairs(const Pairs& pairs) {
    return [&pairs](size_t i) GLMNORM_INLINE_LAMBDA {
      const Bf16Pairs v = pairs(i);
      const V even{v.even}, odd{v.odd};
      return Bf16Pairs{hn::Mul(even, even).raw, hn::Mul(odd, odd).raw};
    };
  }

  // The whole block at `base` whose terms come 2N at a time in the pair
  // layout: terms(i) returns the terms of values i .. i + 2N - 1 as
  // Bf16Pairs (even- and odd-indexed), each index once, in order (a functor
  // may have side effects: the norm backward's dgamma terms). The lanes as
  // in BlockOfSquarePairs.
  template <class PairTerms>
  HWY_INLINE void BlockOfPairs(D d, size_t base, const PairTerms& terms) {
    static_assert(kPairs, "pair blocks need CanonicalSumSteps<D, true>: Finish reorders them");
    static_assert(sizeof(Bf16Pairs::even) == N * sizeof(float), "one pair half per vector");
    V block[K];
    for (size_t k = 0; k < K; ++k) block[k] = hn::Zero(d);
    for (size_t c = 0; c < kBlockChunks; ++c) {
      for (size_t half = 0; half < K / 2; ++half) {
        const Bf16Pairs t = terms(base + c * kVirtualLanes + half * 2 * N);
        block[2 * half] = hn::Add(block[2 * half], V{t.even});
        block[2 * half + 1] = hn::Add(block[2 * half + 1], V{t.odd});
      }
    }
    for (size_t k = 0; k < K; ++k) total[k] = hn::Add(total[k], block[k]);
  }
#endif

#if GLMNORM_HAVE_BF16_PAIRS
  // BlockOfSquarePairs for the bf16 values at x, by VDPBF16PS (DotBf16,
  // convert-inl.h), noting the smallest nonzero |x|. Its sums are
  // BlockOfSquarePairs' wherever no square or partial sum is subnormal (the
  // instruction flushes them): FinishRowInvRms checks that afterwards.
  HWY_INLINE void NativeBlockOfSquares(const hwy::bfloat16_t* x) {
    const __m512i low_word = _mm512_set1_epi32(0xFFFF);
    const __m512i high_word = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
    __m512 block[K];
    for (size_t k = 0; k < K; ++k) block[k] = _mm512_setzero_ps();
    for (size_t c = 0; c < kBlockChunks; ++c) {
      for (size_t half = 0; half < 2; ++half) {
        const __m512i v = _mm512_loadu_si512(x + c * kVirtualLanes + half * 32);
        min_bits = MinNonzeroBits(min_bits, v);
        const __m512i even = _mm512_and_si512(v, low_word);
        const __m512i odd = _mm512_and_si512(v, high_word);
        block[2 * half] = DotBf16(block[2 * half], even, even);
        block[2 * half + 1] = DotBf16(block[2 * half + 1], odd, odd);
      }
    }
    for (size_t k = 0; k < K; ++k) total[k] = hn::Add(total[k], V{block[k]});
  }

  // The smallest nonzero |x| of the row's width values at x: the native
  // blocks' minimum (they end at `base`) and the rest.
  HWY_INLINE float MinNonzeroAbs(const hwy::bfloat16_t* x, size_t base, size_t width) const {
    uint16_t m = MinWord(min_bits);
    for (size_t i = base; i < width; ++i) m = MinNonzeroBits(m, x[i].bits);
    return AbsOfMinBits(m);
  }
#endif

  // Block(d, base, Squares(load)) for the values of a row of T at x, the
  // load being LoadF32; in the pair layout, 32 values per load.
  template <typename T>
  HWY_INLINE void BlockOfSquares(D d, const T* x, size_t base) {
    static_assert(kPairs == SquarePairsFor<T, D>(), "the layout of a row of T");
    if constexpr (kPairs) {
#if GLMNORM_HAVE_BF16_PAIRS
      if (native) {
        NativeBlockOfSquares(x + base);
        return;
      }
#endif
#if GLMNORM_HAVE_SQUARE_PAIRS
      BlockOfSquarePairs(d, base, [x](size_t i) { return LoadBf16Pairs(x + i); });
#endif
    } else {
      Block(d, base, Squares([x](auto dd, size_t i) { return LoadF32(dd, x + i); }));
    }
  }

  // The terms from `base` (where the whole blocks end) to `width`, then the
  // tree over the lanes: the sum.
  template <class Term, class TermPartial>
  HWY_INLINE float Finish(D d, size_t base, size_t width, const Term& term,
                          const TermPartial& term_partial) {
    return FinishWith(d, base, width, NoPairs{}, term, term_partial);
  }

  // Finish where the pair layout's terms (pair_terms(i) as in BlockOfPairs)
  // also serve the whole 64-value chunks after the last block (rows of 128,
  // heads, have no whole block). Same operations on each lane as Finish.
  template <class PairTerms, class Term, class TermPartial>
  HWY_INLINE float FinishWith(D d, size_t base, size_t width, const PairTerms& pair_terms,
                              const Term& term, const TermPartial& term_partial) {
    constexpr bool kTailPairs = kPairs && !std::is_same_v<PairTerms, NoPairs>;
    const bool has_tail = base < width;
    const bool has_blocks = base > 0;  // else every total is +0, in any order
    V block[K];
    for (size_t k = 0; k < K; ++k) block[k] = hn::Zero(d);
#if GLMNORM_HAVE_SQUARE_PAIRS
    if constexpr (kTailPairs) {
      for (; base + kVirtualLanes <= width; base += kVirtualLanes) {
        for (size_t half = 0; half < K / 2; ++half) {
          const Bf16Pairs t = pair_terms(base + half * 2 * N);
          block[2 * half] = hn::Add(block[2 * half], V{t.even});
          block[2 * half + 1] = hn::Add(block[2 * half + 1], V{t.odd});
        }
      }
    }
#endif
    if constexpr (kPairs) {
      if (has_blocks) ToCanonicalOrder(total);
      if constexpr (kTailPairs) ToCanonicalOrder(block);
    }
    (void)pair_terms;
    if (has_tail) {
      for (; base + kVirtualLanes <= width; base += kVirtualLanes) {
        for (size_t k = 0; k < K; ++k) block[k] = hn::Add(block[k], term(d, base + k * N));
      }
      for (size_t k = 0; k < K && base + k * N < width; ++k) {
        const size_t i = base + k * N;
        const V v = i + N <= width ? term(d, i) : term_partial(d, i, width - i);
        block[k] = hn::Add(block[k], v);
      }
      for (size_t k = 0; k < K; ++k) total[k] = hn::Add(total[k], block[k]);
    }
    for (size_t half = K / 2; half >= 1; half /= 2) {
      for (size_t k = 0; k < half; ++k) total[k] = hn::Add(total[k], total[k + half]);
    }
    return TreeSumOfLanes(d, total[0]);
  }

 private:
  struct NoPairs {};

  // Vectors in the pair layout (BlockOfSquarePairs) back in the canonical
  // register order: an exact permutation.
  static HWY_INLINE void ToCanonicalOrder(V* v) {
#if GLMNORM_HAVE_BF16_PAIRS
    for (size_t k = 0; k < K; k += 2) {
      PairsInMemoryOrder(Bf16Pairs{v[k].raw, v[k + 1].raw}, &v[k].raw, &v[k + 1].raw);
    }
#elif GLMNORM_HAVE_SQUARE_PAIRS
    for (size_t k = 0; k < K; k += 2) {  // AVX2
      // Lanes 0 1 2 3 | 8 9 10 11 and 4 5 6 7 | 12 13 14 15 of the pair,
      // then their halves regrouped by inserts (vperm2f128 is 8 uops on
      // Zen 1).
      const __m256 lo = _mm256_unpacklo_ps(v[k].raw, v[k + 1].raw);
      const __m256 hi = _mm256_unpackhi_ps(v[k].raw, v[k + 1].raw);
      v[k] = V{_mm256_insertf128_ps(lo, _mm256_castps256_ps128(hi), 1)};
      v[k + 1] = V{_mm256_insertf128_ps(hi, _mm256_extractf128_ps(lo, 1), 0)};
    }
#else
    (void)v;
#endif
  }
};

// The canonical sum (docs/ACCURACY.md) of the float32 terms of a row, as in
// CanonicalSumSteps. Each index is visited exactly once, in increasing
// order, so a term functor may have side effects (the norm backward
// accumulates dgamma there).
template <class D, class Term, class TermPartial>
HWY_INLINE float CanonicalSum(D d, size_t width, const Term& term,
                              const TermPartial& term_partial) {
  CanonicalSumSteps<D> sum(d);
  size_t base = 0;
  for (; base + sum.kBlock <= width; base += sum.kBlock) sum.Block(d, base, term);
  return sum.Finish(d, base, width, term, term_partial);
}

// Canonical sum of squares of a row of `width` values. `load(d, i)` returns
// the float32 values i .. i+Lanes-1 of the row; `load_partial(d, i, n)` the n
// values from i with zeros after them. Each index is loaded exactly once.
template <class D, class Load, class LoadPartial>
HWY_INLINE float CanonicalSumOfSquares(D d, size_t width, const Load& load,
                                       const LoadPartial& load_partial) {
  return CanonicalSum(d, width, Squares(load), Squares(load_partial));
}

// r = 1 / sqrt(sum / width + eps), float32 like the reference.
HWY_INLINE float InverseRms(float sum_sq, size_t width, float eps) {
  const float mean = sum_sq / static_cast<float>(width);
  return 1.0f / std::sqrt(mean + eps);
}

// True when float32 squares overflowed (a finite row near float max gives an
// infinite sum, and the reference's r = 0 zeroes the row) or underflowed in a
// way eps does not hide (tiny rows with eps ~ 0). NaN and inf inputs give a
// NaN or inf sum too; RescaledInverseRms tells them apart.
HWY_INLINE bool NeedsRescale(float sum_sq, size_t width, float eps) {
  return std::isinf(sum_sq) ||
         (sum_sq < 0x1p-96f && sum_sq / static_cast<float>(width) >= eps * 0x1p-25f);
}

// 1/rms of a row as a float32 multiplier r, applied as h = (x * prescale) * r.
// prescale is 1 except on the rescaling path below.
struct InvRms {
  float r;
  float prescale;
  bool finite_row;  // no inf or NaN in the row (so x * r has no NaN)
  // The smallest nonzero |x| of the row (+inf if all are zero) where the
  // reduction noted it (bf16 rows on CPUs with AVX512-BF16), else 0.
  float min_abs = 0.0f;
};

// The slow path for NeedsRescale rows: the canonical sum of squares of the
// row scaled by a power of two (exact) so that max|x| is near 1, and r for
// the scaled row in float64 (so r stays a normal float32 even for rows near
// float max). Rows holding inf or NaN, or all zeros, keep the plain formula.
template <class D, class Load, class LoadPartial>
HWY_NOINLINE InvRms RescaledInverseRms(D d, size_t width, float sum_sq, float eps, const Load& load,
                                       const LoadPartial& load_partial) {
  constexpr size_t N = hn::MaxLanes(d);
  auto vmax = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= width; i += N) vmax = hn::Max(vmax, hn::Abs(load(d, i)));
  if (i < width) vmax = hn::Max(vmax, hn::Abs(load_partial(d, i, width - i)));
  HWY_ALIGN float lanes[N];
  hn::Store(vmax, d, lanes);
  float max_abs = 0.0f;
  for (size_t k = 0; k < N; ++k) max_abs = std::max(max_abs, lanes[k]);
  if (!(max_abs > 0.0f) || !std::isfinite(max_abs)) {
    return {InverseRms(sum_sq, width, eps), 1.0f, std::isfinite(max_abs)};
  }
  const int exponent = std::clamp(-std::ilogb(max_abs), -126, 126);
  const float scale = std::ldexp(1.0f, exponent);
  const auto vscale = hn::Set(d, scale);
  const float scaled_sum = CanonicalSumOfSquares(
      d, width, [&](auto dd, size_t j) { return hn::Mul(load(dd, j), vscale); },
      [&](auto dd, size_t j, size_t n) { return hn::Mul(load_partial(dd, j, n), vscale); });
  const double s = scale;
  const double mean = static_cast<double>(scaled_sum) / static_cast<double>(width);
  return {static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps) * s * s)), scale,
          true};
}

// The NaN of a row that holds NaN (docs/SPEC.md §10): of the row's float32
// values that are NaN, each quieted, the one with the largest bit pattern
// read as an unsigned integer (a negative NaN before a positive one, then
// the larger payload). The row's sum of squares is NaN too, but which of its
// NaNs survives a float add depends on the operand order the compiler chose
// (x86 keeps the first operand's); this does not.
template <class D, class Load, class LoadPartial>
HWY_NOINLINE float RowNaN(D d, size_t width, const Load& load, const LoadPartial& load_partial) {
  const hn::RebindToUnsigned<D> du;
  constexpr size_t N = hn::MaxLanes(d);
  const auto quiet = hn::Set(du, 0x00400000u);
  auto best = hn::Zero(du);
  const auto scan = [&](hn::Vec<D> x) {
    const auto bits = hn::Or(hn::BitCast(du, x), quiet);
    best = hn::Max(best, hn::IfThenElseZero(hn::RebindMask(du, hn::IsNaN(x)), bits));
  };
  size_t i = 0;
  for (; i + N <= width; i += N) scan(load(d, i));
  if (i < width) scan(load_partial(d, i, width - i));
  HWY_ALIGN uint32_t lanes[N];
  hn::Store(best, du, lanes);
  uint32_t bits = 0;
  for (size_t k = 0; k < N; ++k) bits = std::max(bits, lanes[k]);
  float nan;
  std::memcpy(&nan, &bits, sizeof nan);
  return nan;
}

// 1/rms of a row from its canonical sum of squares, with the rescaling
// fallback. A row holding NaN gets r = its RowNaN, which
// ForEachNormVectorSpan then gives to every output element of the row.
template <class D, class Load, class LoadPartial>
HWY_INLINE InvRms InvRmsFromSum(D d, size_t width, float eps, float sum_sq, const Load& load,
                                const LoadPartial& load_partial) {
  if (HWY_UNLIKELY(NeedsRescale(sum_sq, width, eps))) {
    return RescaledInverseRms(d, width, sum_sq, eps, load, load_partial);
  }
  if (HWY_UNLIKELY(std::isnan(sum_sq))) return {RowNaN(d, width, load, load_partial), 1.0f, false};
  return {InverseRms(sum_sq, width, eps), 1.0f, std::isfinite(sum_sq)};
}

// InverseRms of a row, with the rescaling fallback and the row-NaN rule.
template <class D, class Load, class LoadPartial>
HWY_INLINE InvRms RowInverseRms(D d, size_t width, float eps, const Load& load,
                                const LoadPartial& load_partial) {
  const float sum_sq = CanonicalSumOfSquares(d, width, load, load_partial);
  return InvRmsFromSum(d, width, eps, sum_sq, load, load_partial);
}

// Whether the whole blocks of a bf16 row take VDPBF16PS: with AVX512-BF16.
template <bool kPairs>
HWY_INLINE bool NativeBlocks() {
#if GLMNORM_HAVE_BF16_PAIRS
  return kPairs && g_native_bf16;
#else
  return false;
#endif
}

// A nonzero |x| below this has a subnormal square (under 2^-126).
constexpr float kNativeMinAbs = 0x1p-63f;

// InvRms of the width values of T at x, whose whole blocks `sum` has added
// (up to `base`). A native sum is kept where the row's smallest nonzero |x|
// proves every square and partial sum normal (so VDPBF16PS flushed
// nothing); otherwise the row is summed again without it. Same bits as
// RowInverseRms.
template <class D, bool kPairs, typename T>
HWY_INLINE InvRms FinishRowInvRms(D d, CanonicalSumSteps<D, kPairs>& sum, size_t base, size_t width,
                                  float eps, const T* x) {
  const auto load = [x](auto dd, size_t i) { return LoadF32(dd, x + i); };
  const auto load_partial = [x](auto dd, size_t i, size_t n) {
    return LoadF32Partial(dd, x + i, n);
  };
  float sum_sq;
  if constexpr (kPairs) {
#if GLMNORM_HAVE_SQUARE_PAIRS
    const auto pairs = [x](size_t i) { return LoadBf16Pairs(x + i); };
    sum_sq = sum.FinishWith(d, base, width, sum.SquaresOfPairs(pairs), Squares(load),
                            Squares(load_partial));
#endif
  } else {
    sum_sq = sum.Finish(d, base, width, Squares(load), Squares(load_partial));
  }
  float min_abs = 0.0f;
#if GLMNORM_HAVE_BF16_PAIRS
  if constexpr (kPairs) {
    if (sum.native) {
      min_abs = sum.MinNonzeroAbs(x, base, width);
      if (HWY_UNLIKELY(!(min_abs >= kNativeMinAbs))) {
        CanonicalSumSteps<D, kPairs> exact(d);
        size_t b = 0;
        for (; b + exact.kBlock <= width; b += exact.kBlock) exact.BlockOfSquares(d, x, b);
        sum_sq = exact.Finish(d, b, width, Squares(load), Squares(load_partial));
        min_abs = 0.0f;
      }
    }
  }
#endif
  InvRms inv = InvRmsFromSum(d, width, eps, sum_sq, load, load_partial);
  inv.min_abs = min_abs;
  return inv;
}

// RowInverseRms of the width values of T at x (loaded by LoadF32), whole
// blocks through CanonicalSumSteps::BlockOfSquares.
template <class D, typename T>
HWY_INLINE InvRms RowInverseRmsOf(D d, size_t width, float eps, const T* x) {
  constexpr bool kPairs = SquarePairsFor<T, D>();
  CanonicalSumSteps<D, kPairs> sum(d, NativeBlocks<kPairs>());
  size_t base = 0;
  for (; base + sum.kBlock <= width; base += sum.kBlock) sum.BlockOfSquares(d, x, base);
  return FinishRowInvRms(d, sum, base, width, eps, x);
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
