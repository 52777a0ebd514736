// The row loop of the norms' reductions (ForEachRowInvRms, at the end), and
// 1/rms of up to 16 narrow rows at once (GLM-4.5's heads of 128) on the
// AVX3 and AVX2 targets; compiled once per SIMD target like reduction-inl.h
// (the other targets reduce row by row: GLMNORM_HAVE_ROW_BATCH 0).
//
// Why: a head of 128 bf16 values is 8 vectors of work, and the tail of its
// reduction (a 16-lane tree, a divide, a square root, a divide, the checks)
// cost about as much again, mostly as latency the row loop waits on. Here the
// last levels of the trees share one shuffle network (AVX3: 30 shuffles and
// 15 adds for 16 rows; AVX2: 18 shuffles and 7 adds for 8) and one vector of
// divides and square roots gives a value of r per row.
//
// Same bits as RowInverseRms row by row: for a width of c * 64 (c <= 8, one
// canonical block) the canonical sum of docs/ACCURACY.md is, per vector k of
// the 64 virtual lanes, S_k = x[k]^2 + x[64 + k]^2 + ... in that order, then
// the tree's levels: with 16 lanes (S_0 + S_2) + (S_1 + S_3), then lanes
// l + (l + 8), l + (l + 4), l + (l + 2), l + (l + 1); with 8 lanes
// ((S_0 + S_4) + (S_2 + S_6)) + ((S_1 + S_5) + (S_3 + S_7)), then
// l + (l + 4), l + (l + 2), l + (l + 1): the networks below add exactly
// those pairs, the lower lane first. Rows whose sum is
// not a normal float32 at least 2^-96 (NaN, inf, zero, tiny: the rescaling
// and NaN rules) take InvRmsFromSum with the same sum, as a row alone does.

#if defined(GLMNORM_SRC_SIMD_ROW_BATCH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_ROW_BATCH_INL_H_
#undef GLMNORM_SRC_SIMD_ROW_BATCH_INL_H_
#else
#define GLMNORM_SRC_SIMD_ROW_BATCH_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "hwy/highway.h"
#include "simd/convert-inl.h"
#include "simd/reduction-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kRowBatch = 16;

#undef GLMNORM_HAVE_ROW_BATCH  // defined once per target
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2
#define GLMNORM_HAVE_ROW_BATCH 1

// Whether `rows` rows of T of this width are reduced in batches: a whole
// number of 64-lane chunks, one canonical block at most, and enough rows that
// a batch is not mostly repeats (a short batch costs a full one). On AVX2,
// not bf16: its rows keep the pair layout (SquarePairsFor), which splits 16
// values per load without the widening shifts a batch would need.
template <typename T>
HWY_INLINE bool RowBatches(size_t width, int64_t rows) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (std::is_same_v<T, hwy::bfloat16_t>) return false;
#endif
  return width > 0 && width % kVirtualLanes == 0 && width <= kVirtualLanes * kBlockChunks &&
         rows >= 8;
}

// The float32 register of this target (__m512 or __m256).
using RowSums = decltype(hn::Zero(hn::ScalableTag<float>()).raw);

// For j < Lanes (16 on AVX3, 8 on AVX2): u[j] = the levels of rows[j]'s
// canonical tree down to one vector, S_k + S_(k + K/2) halving K (the
// header's S_k; AVX3: (S_0 + S_2) + (S_1 + S_3)). Row slots past n repeat
// the last row.
template <typename T>
HWY_INLINE void SquareSumsOfRows(size_t width, const T* const* rows, size_t n, RowSums* u) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr size_t N = hn::MaxLanes(d);
  constexpr size_t K = kVirtualLanes / N;
  for (size_t j = 0; j < N; ++j) {
    const T* x = rows[j < n ? j : n - 1];
    V s[K];
    for (size_t k = 0; k < K; ++k) {
      const V v = LoadF32(d, x + k * N);
      s[k] = hn::Mul(v, v);  // = 0 + v*v: squares are never -0
    }
    for (size_t c = kVirtualLanes; c < width; c += kVirtualLanes) {
      for (size_t k = 0; k < K; ++k) {
        const V v = LoadF32(d, x + c + k * N);
        s[k] = hn::Add(s[k], hn::Mul(v, v));
      }
    }
    for (size_t half = K / 2; half > 0; half /= 2) {
      for (size_t k = 0; k < half; ++k) s[k] = hn::Add(s[k], s[k + half]);
    }
    u[j] = s[0].raw;
  }
}

#if HWY_TARGET == HWY_AVX3
#if GLMNORM_HAVE_BF16_PAIRS
// SquareSumsOfRows for bf16 rows by VDPBF16PS, 32 values per load, as
// CanonicalSumSteps::NativeBlockOfSquares does (the same bits where no square
// or partial sum is subnormal). Returns the smallest nonzero |x| of the n
// rows: below kNativeMinAbs the sums may differ, and the caller sums again.
HWY_INLINE float NativeSquareSumsOfRows(size_t width, const hwy::bfloat16_t* const* rows, size_t n,
                                        __m512* u) {
  const __m512i low_word = _mm512_set1_epi32(0xFFFF);
  const __m512i high_word = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  // The pair layout back to virtual lanes (as CanonicalSumSteps::Finish).
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  __m512i min_bits = _mm512_set1_epi32(-1);
  for (size_t j = 0; j < kRowBatch; ++j) {
    const hwy::bfloat16_t* x = rows[j < n ? j : n - 1];
    __m512 p[4];
    for (size_t k = 0; k < 4; ++k) p[k] = _mm512_setzero_ps();
    for (size_t c = 0; c < width; c += kVirtualLanes) {
      for (size_t half = 0; half < 2; ++half) {
        const __m512i v = _mm512_loadu_si512(x + c + 32 * half);
        min_bits = MinNonzeroBits(min_bits, v);
        const __m512i even = _mm512_and_si512(v, low_word);
        const __m512i odd = _mm512_and_si512(v, high_word);
        p[2 * half] = DotBf16(p[2 * half], even, even);
        p[2 * half + 1] = DotBf16(p[2 * half + 1], odd, odd);
      }
    }
    const __m512 s0 = _mm512_permutex2var_ps(p[0], lo, p[1]);
    const __m512 s1 = _mm512_permutex2var_ps(p[0], hi, p[1]);
    const __m512 s2 = _mm512_permutex2var_ps(p[2], lo, p[3]);
    const __m512 s3 = _mm512_permutex2var_ps(p[2], hi, p[3]);
    u[j] = _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
  }
  return AbsOfMinBits(MinWord(min_bits));
}
#endif

// The last four levels of 16 rows' trees (lanes l + (l + 8), + 4, + 2, + 1):
// lane 4b + m of the result holds the sum of row 4m + b (LaneOfRow).
HWY_INLINE __m512 TreeSumsOfRows(const __m512* u) {
  // Lanes l + (l + 8): rows 2p and 2p+1 side by side (8 lanes each).
  __m512 a[8];
  for (size_t p = 0; p < 8; ++p) {
    a[p] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * p], u[2 * p + 1], 0x44),
                         _mm512_shuffle_f32x4(u[2 * p], u[2 * p + 1], 0xEE));
  }
  // l + (l + 4): block b of b4[q] is row 4q + b (4 lanes).
  __m512 b4[4];
  for (size_t q = 0; q < 4; ++q) {
    b4[q] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * q], a[2 * q + 1], 0x88),
                          _mm512_shuffle_f32x4(a[2 * q], a[2 * q + 1], 0xDD));
  }
  // l + (l + 2): block b of c2[t] is rows 8t + b and 8t + 4 + b (2 lanes each).
  __m512 c2[2];
  for (size_t t = 0; t < 2; ++t) {
    c2[t] = _mm512_add_ps(_mm512_shuffle_ps(b4[2 * t], b4[2 * t + 1], 0x44),
                          _mm512_shuffle_ps(b4[2 * t], b4[2 * t + 1], 0xEE));
  }
  // l + (l + 1): lane 4b + m is row 4m + b.
  return _mm512_add_ps(_mm512_shuffle_ps(c2[0], c2[1], 0x88),
                       _mm512_shuffle_ps(c2[0], c2[1], 0xDD));
}
HWY_INLINE size_t LaneOfRow(size_t j) { return 4 * (j % 4) + j / 4; }
#else   // AVX2
// The last three levels of 8 rows' trees (lanes l + (l + 4), + 2, + 1):
// lane 4h + m of the result holds the sum of row 2m + h (LaneOfRow).
HWY_INLINE __m256 TreeSumsOfRows(const __m256* u) {
  // l + (l + 4): row 2p in the low 128 bits of a[p], row 2p + 1 in the high
  // (128-bit inserts: vperm2f128 is 8 uops on Zen 1).
  __m256 a[4];
  for (size_t p = 0; p < 4; ++p) {
    const __m256 lows = _mm256_insertf128_ps(u[2 * p], _mm256_castps256_ps128(u[2 * p + 1]), 1);
    const __m256 highs = _mm256_insertf128_ps(u[2 * p + 1], _mm256_extractf128_ps(u[2 * p], 1), 0);
    a[p] = _mm256_add_ps(lows, highs);
  }
  // l + (l + 2): half h of b[q] is rows 4q + h and 4q + 2 + h (2 lanes each).
  __m256 b[2];
  for (size_t q = 0; q < 2; ++q) {
    b[q] = _mm256_add_ps(_mm256_shuffle_ps(a[2 * q], a[2 * q + 1], 0x44),
                         _mm256_shuffle_ps(a[2 * q], a[2 * q + 1], 0xEE));
  }
  // l + (l + 1): lane 4h + m is row 2m + h.
  return _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], 0x88), _mm256_shuffle_ps(b[0], b[1], 0xDD));
}
HWY_INLINE size_t LaneOfRow(size_t j) { return 4 * (j % 2) + j / 2; }
#endif  // HWY_TARGET == HWY_AVX3

// inv[j] = RowInverseRms of rows[j] (width values of T each), j < n <= 16,
// one shuffle network per Lanes rows (16 on AVX3, 8 on AVX2). Row slots past
// n repeat the last row (computed, not used), so a short batch costs a full
// one: callers batch only when there are several rows. bf16 rows on CPUs
// with AVX512-BF16 are summed by VDPBF16PS, and their inv[j].min_abs is the
// batch's smallest nonzero |x| (a bound for each row's).
template <typename T>
HWY_INLINE void InvRmsOfRows(size_t width, float eps, const T* const* rows, size_t n, InvRms* inv) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr size_t kGroup = hn::MaxLanes(d);
  static_assert(kRowBatch % kGroup == 0, "a batch is whole groups");
  for (size_t g = 0; g < n; g += kGroup) {
    const size_t m = std::min(kGroup, n - g);
    RowSums u[kGroup];
    float min_abs = 0.0f;
#if GLMNORM_HAVE_BF16_PAIRS
    if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {
      if (g_native_bf16) min_abs = NativeSquareSumsOfRows(width, rows + g, m, u);
    }
#endif
    if (!(min_abs >= kNativeMinAbs)) {
      min_abs = 0.0f;
      SquareSumsOfRows(width, rows + g, m, u);
    }
    const V sum{TreeSumsOfRows(u)};
    // InverseRms in every lane, as float32 like the scalar formula.
    const V mean = hn::Div(sum, hn::Set(d, static_cast<float>(width)));
    const V r = hn::Div(hn::Set(d, 1.0f), hn::Sqrt(hn::Add(mean, hn::Set(d, eps))));
    // Sums at least 2^-96 and finite need no rescaling and hold no NaN.
    const auto plain = hn::And(hn::Ge(sum, hn::Set(d, 0x1p-96f)),
                               hn::Lt(sum, hn::Set(d, std::numeric_limits<float>::infinity())));
    HWY_ALIGN float sums[kGroup];
    HWY_ALIGN float rs[kGroup];
    hn::Store(sum, d, sums);
    hn::Store(r, d, rs);
    uint64_t plain_bits = 0;
    hn::StoreMaskBits(d, plain, reinterpret_cast<uint8_t*>(&plain_bits));
    for (size_t j = 0; j < m; ++j) {
      const size_t lane = LaneOfRow(j);
      if (HWY_LIKELY((plain_bits >> lane) & 1)) {
        inv[g + j] = {rs[lane], 1.0f, true, min_abs};
      } else {
        const T* x = rows[g + j];
        inv[g + j] = InvRmsFromSum(
            d, width, eps, sums[lane], [x](auto dd, size_t i) { return LoadF32(dd, x + i); },
            [x](auto dd, size_t i, size_t k) { return LoadF32Partial(dd, x + i, k); });
      }
    }
  }
}

#else
#define GLMNORM_HAVE_ROW_BATCH 0
template <typename T>
HWY_INLINE bool RowBatches(size_t, int64_t) {
  return false;
}
#endif

#if GLMNORM_HAVE_ROW_BATCH
// ForEachRowInvRms for rows that RowBatches serves, 16 at a time:
// finish_batch(base, n, inv) for rows base, ..., base + n - 1 (n <= 16), in
// order, inv[j] being row base + j's 1/rms.
template <typename T, class Row, class FinishBatch>
HWY_INLINE void ForEachRowBatchInvRms(size_t width, float eps, int64_t begin, int64_t end,
                                      const Row& row, const FinishBatch& finish_batch) {
  for (int64_t base = begin; base < end; base += kRowBatch) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kRowBatch, end - base));
    const T* rows[kRowBatch];
    for (size_t j = 0; j < n; ++j) rows[j] = row(base + static_cast<int64_t>(j));
    InvRms inv[kRowBatch];
    InvRmsOfRows(width, eps, rows, n, inv);
    finish_batch(base, n, static_cast<const InvRms*>(inv));
  }
}
#endif

// Calls finish(i, inv) for i = begin, ..., end - 1 in order, inv being
// RowInverseRms of the width values at row(i) (a const T*). The reduction
// of row i + 1 runs before finish(i): rows never overlap (y may be x), and
// it fills the wait on row i's square root and divides. Where RowBatches
// holds, 16 rows are reduced at once instead. Same bits either way.
template <typename T, class D, class Row, class Finish>
HWY_INLINE void ForEachRowInvRms(D d, size_t width, float eps, int64_t begin, int64_t end,
                                 const Row& row, const Finish& finish) {
#if GLMNORM_HAVE_ROW_BATCH
  if (RowBatches<T>(width, end - begin)) {
    ForEachRowBatchInvRms<T>(width, eps, begin, end, row,
                             [&](int64_t base, size_t n, const InvRms* inv) {
                               for (size_t j = 0; j < n; ++j) {
                                 finish(base + static_cast<int64_t>(j), inv[j]);
                               }
                             });
    return;
  }
#endif
  const auto inv_of = [&](int64_t i) { return RowInverseRmsOf(d, width, eps, row(i)); };
  InvRms next = begin < end ? inv_of(begin) : InvRms{};
  for (int64_t i = begin; i < end; ++i) {
    const InvRms inv = next;
    if (i + 1 < end) next = inv_of(i + 1);
    finish(i, inv);
  }
}

// Whether ForEachRowInSpans serves rows of this width: two canonical blocks
// or more (rms_norm's hidden rows of 4096 and 5120), where a row is long
// enough that reading the next one in a burst of its own leaves the memory
// idle while this one is written.
HWY_INLINE bool RowsInSpans(size_t width) { return width >= 2 * kVirtualLanes * kBlockChunks; }

// The row loop of ForEachRowInvRms for wide rows, with the reduction of row
// i + 1 run block by block between the spans of row i's normalising:
// normalize(i, inv, begin, end) handles values [begin, end) of row i, for
// consecutive spans that cover the row (begin 0 first, end width last).
// Each block of the next row is read while a block of this one is written,
// so the read stream never stops (issue 16: one burst per row left memory
// idle while the row was normalised from cache). Same sums, in the same
// order, as RowInverseRms (CanonicalSumSteps); rows never overlap (y may be
// x). Called for any width, it is correct; RowsInSpans says where it pays.
template <typename T, class D, class Row, class Normalize>
HWY_INLINE void ForEachRowInSpans(D d, size_t width, float eps, int64_t begin, int64_t end,
                                  const Row& row, const Normalize& normalize) {
  if (begin >= end) return;
  constexpr bool kPairs = SquarePairsFor<T, D>();
  const bool native = NativeBlocks<kPairs>();
  InvRms inv = RowInverseRmsOf(d, width, eps, row(begin));
  for (int64_t i = begin; i + 1 < end; ++i) {
    const T* next = row(i + 1);
    CanonicalSumSteps<D, kPairs> sum(d, native);
    size_t base = 0;
    for (; base + sum.kBlock <= width; base += sum.kBlock) {
      sum.BlockOfSquares(d, next, base);
      normalize(i, inv, base, base + sum.kBlock);
    }
    if (base < width) normalize(i, inv, base, width);
    inv = FinishRowInvRms(d, sum, base, width, eps, next);
  }
  normalize(end - 1, inv, size_t{0}, width);
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
