// The norm backward's CPU kernels, compiled once per SIMD target
// (foreach_target) and dispatched at run time: per block of rows, dx and the
// block's float32 dgamma partial; then the ordered sum of the partials.
// The maths is rms_norm_backward.h's; every operation is an explicit Mul or
// Add (never MulAdd), the row sum is the canonical reduction, and the dgamma
// sums are per column in row order: every target gives the same bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/rms_norm/rms_norm_backward_cpu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/rms_norm/rms_norm_backward_job.h"
#include "simd/convert-inl.h"
#include "simd/norm_row-inl.h"
#include "simd/reduction-inl.h"
#include "simd/rope-inl.h"
#include "simd/row_batch-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

// Loads n values of a runtime float dtype as float32 (zeros after them).
template <class D>
HWY_INLINE hn::Vec<D> LoadAny(D d, DType t, const void* p, size_t n) {
  const bool full = n == hn::MaxLanes(d);
  switch (t) {
    case DType::kBF16: {
      const BF16* q = static_cast<const BF16*>(p);
      return full ? LoadF32(d, q) : LoadF32Partial(d, q, n);
    }
    case DType::kF16: {
      const F16* q = static_cast<const F16*>(p);
      return full ? LoadF32(d, q) : LoadF32Partial(d, q, n);
    }
    default: {
      const float* q = static_cast<const float*>(p);
      return full ? LoadF32(d, q) : LoadF32Partial(d, q, n);
    }
  }
}

// Stores n lanes rounded to a runtime float dtype.
template <class D>
HWY_INLINE void StoreAny(D d, hn::Vec<D> v, DType t, void* p, size_t n) {
  const bool full = n == hn::MaxLanes(d);
  switch (t) {
    case DType::kBF16: {
      BF16* q = static_cast<BF16*>(p);
      return full ? StoreF32As(d, v, q) : StoreF32AsPartial(d, v, q, n);
    }
    case DType::kF16: {
      F16* q = static_cast<F16*>(p);
      return full ? StoreF32As(d, v, q) : StoreF32AsPartial(d, v, q, n);
    }
    default: {
      float* q = static_cast<float*>(p);
      return full ? StoreF32As(d, v, q) : StoreF32AsPartial(d, v, q, n);
    }
  }
}

#if GLMNORM_HAVE_BF16_PAIRS
// bf16 rows in the pair layout (Bf16Pairs, convert-inl.h), 32 values per
// 64-byte load, for rows that BackwardPairRowOk admits: every rounding of
// pass A is then one VCVTNE2PS2BF16 for 32 values, with no per-vector
// subnormal check (issue 16; docs/BACKWARD.md "bf16 rows in the pair
// layout").
//
// PackBf16(odd, even) holds element 2m at word m and 2m + 1 at word 16 + m.
// One zero-masking word permute per 16 floats puts words back as float32
// (the word in the high half): in the pair layout (WidenPacked, tables even
// and odd) or in memory order (tables lo and hi: the dgamma terms).
struct PairWordOrder {
  uint16_t even[32], odd[32], lo[32], hi[32];
};
constexpr PairWordOrder MakePairWordOrder() {
  PairWordOrder o{};
  const auto word_of = [](int element) {
    return element % 2 == 0 ? element / 2 : 16 + element / 2;
  };
  for (int m = 0; m < 16; ++m) {
    o.even[2 * m + 1] = static_cast<uint16_t>(m);
    o.odd[2 * m + 1] = static_cast<uint16_t>(16 + m);
    o.lo[2 * m + 1] = static_cast<uint16_t>(word_of(m));
    o.hi[2 * m + 1] = static_cast<uint16_t>(word_of(16 + m));
  }
  return o;
}
inline constexpr PairWordOrder kPairWordOrder = MakePairWordOrder();
constexpr __mmask32 kHighWords = 0xAAAAAAAAu;

HWY_INLINE Bf16Pairs WidenPacked(__m512i packed, __m512i to_even, __m512i to_odd) {
  return {_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighWords, to_even, packed)),
          _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighWords, to_odd, packed))};
}

// The largest of the 32 words of v (MinWord of their complements).
HWY_INLINE uint16_t MaxWord(__m512i v) {
  return static_cast<uint16_t>(0xFFFF - MinWord(_mm512_xor_si512(v, _mm512_set1_epi32(-1))));
}
// A bf16 word doubled (v + v: the sign dropped) above this is a NaN's.
constexpr uint16_t kDoubledInf = 0xFF00;

// Whether any of the n bf16 values at p is NaN.
HWY_INLINE bool AnyNaN(const BF16* p, size_t n) {
  __m512i top = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_loadu_si512(p + i);
    top = _mm512_max_epu16(top, _mm512_add_epi16(v, v));
  }
  bool nan = MaxWord(top) > kDoubledInf;
  for (; i < n; ++i) nan |= static_cast<uint16_t>(p[i].bits << 1) > kDoubledInf;
  return nan;
}

// Whether a row's pair blocks (values [0, base)) may round natively: every
// input of pass A's three roundings (xf = x * r, dy * bf16(xf), dy * g) is
// zero or at least 2^-126 whatever the roundings before it (bf16(xf) >=
// xf / 2), so VCVTNE2PS2BF16, which flushes subnormal inputs, flushes none
// (the forward's NativeRowOk, for the backward's products). x_min, dy_min:
// the smallest nonzero |x| and |dy| of those values (+inf when none).
HWY_INLINE bool BackwardPairRowOk(float x_min, float dy_min, float r, float gamma_min) {
  const double h_min = static_cast<double>(x_min) * r;
  return h_min >= 0x1p-125 && h_min * dy_min >= 0x1p-124 &&
         static_cast<double>(dy_min) * gamma_min >= 0x1p-125;
}
#endif

// One block of rows. T: x's dtype, W: gamma's, Dy: dy's, Dx: dx's.
template <typename T, typename W, typename Dy, typename Dx, bool kCastThenScale>
void BackwardBlock(const RmsNormBackwardJob& job, int64_t block) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr size_t N = hn::MaxLanes(d);
  const size_t width = static_cast<size_t>(job.p.width);
  const W* gamma = static_cast<const W*>(job.gamma);
  const float offset = job.p.weight_offset;
  const bool has_offset = offset != 0.0f;
  const V voff = hn::Set(d, offset);
  // The row's xf and dh, kept from pass A for pass B (float32: exact).
  float* HWY_RESTRICT xf_row = job.scratch + block * 2 * job.partial_stride;
  float* HWY_RESTRICT dh_row = xf_row + job.partial_stride;
  const int64_t row_begin = block * kDGammaRowBlock;
  const int64_t row_end = std::min(job.rows, row_begin + kDGammaRowBlock);
  const size_t dres_size = SizeOf(job.dx_type), dx2_size = SizeOf(job.dx2_type);
  // Streaming stores only where a vector of Dx is at least 16 bytes:
  // Highway 1.0.3's Stream of a narrower vector (bf16 on SSE4: 8 bytes)
  // writes 16 bytes (_mm_stream_si128), past the vector and with 16-byte
  // alignment required.
  constexpr bool kCanStream = N * sizeof(Dx) >= 16;
  const bool stream =
      kCanStream && job.rows * job.p.width * int64_t{sizeof(Dx)} >= cpu::kStreamMinBytes;
#if GLMNORM_HAVE_BF16_PAIRS
  // The pair layout for bf16 rows (BackwardPairRowOk): the whole 64-value
  // chunks [0, pair_end) of each row that it admits (heads of 128 included),
  // the whole canonical blocks among them by BlockOfPairs.
  constexpr bool kPairTypes = N == 16 && kCastThenScale && std::is_same_v<T, BF16> &&
                              std::is_same_v<W, BF16> && std::is_same_v<Dy, BF16> &&
                              std::is_same_v<Dx, BF16>;
  constexpr size_t kBlock = kVirtualLanes * kBlockChunks;
  const size_t pair_end = kPairTypes && g_native_bf16 ? width / kVirtualLanes * kVirtualLanes : 0;
  const size_t block_end = width / kBlock * kBlock;
  // No NaN enters the pair blocks (a NaN in gamma: no row takes them), so
  // the only NaN there is x86's default one (inf - inf, inf * 0), the same
  // bits whatever the operand order: two different NaNs meeting in an add
  // keep the first operand's, and the pair blocks add in another order than
  // the per-vector path (docs/BACKWARD.md, "Special values").
  float gamma_min = 0.0f;
  bool gamma_nan = true;
  // The word permutes of both passes (kPairWordOrder), loaded once a block.
  const __m512i to_even = _mm512_loadu_si512(kPairWordOrder.even);
  const __m512i to_odd = _mm512_loadu_si512(kPairWordOrder.odd);
  const __m512i to_lo = _mm512_loadu_si512(kPairWordOrder.lo);
  const __m512i to_hi = _mm512_loadu_si512(kPairWordOrder.hi);
  if constexpr (kPairTypes) {
    if (pair_end != 0) {
      gamma_min = MinNonzeroAbsOfGamma(gamma, width, offset);
      gamma_nan = AnyNaN(gamma, width);
    }
  }
#endif
  // QkNormBackward with RoPE: each row's dy un-rotated (UnrotateHead), then
  // read from here.
  HWY_ALIGN Dy unrotated[kMaxRopeRowWidth];
  const size_t rotary_dim = static_cast<size_t>(job.rope.rotary_dim);
  // dx of one row given its 1/rms, and its dgamma terms.
  const auto backward_row = [&](int64_t row, const InvRms& inv) {
    // The row's leaf sum (kDGammaRowBlock is a multiple of kDGammaLeafRows:
    // a leaf never spans two blocks). The rows are padded to a multiple of 16
    // floats: whole vectors may be loaded and stored even at a row's tail.
    float* HWY_RESTRICT partial = job.partials + (row / kDGammaLeafRows) * job.partial_stride;
    if (row % kDGammaLeafRows == 0) {
      std::memset(partial, 0, sizeof(float) * static_cast<size_t>(job.partial_stride));
    }
    const T* x = static_cast<const T*>(job.x) + job.x_rows.Offset(row);
    const Dy* dy = static_cast<const Dy*>(job.dy) + job.dy_rows.Offset(row);
    Dx* dx = static_cast<Dx*>(job.dx) + job.dx_rows.Offset(row);
    if (rotary_dim != 0) {
      const int64_t token = row / job.rope_rows_per_token;
      UnrotateHead(d, rotary_dim, width, dy, job.rope.Cos(token), job.rope.Sin(token), unrotated);
      dy = unrotated;
    }
    // rr: the derivative of x_i * prescale * r with respect to x_i.
    const float rr = inv.r * inv.prescale;
    const V vr = hn::Set(d, inv.r);
    const V vpre = hn::Set(d, inv.prescale);
    const V vrr = hn::Set(d, rr);
    // xf (the unrounded normalised value, as the forward computes it) and dh.
    const auto xf_of = [&](V xv) { return hn::Mul(hn::Mul(xv, vpre), vr); };
    const auto dh_of = [&](V dyv, V g) {
      if (has_offset) g = hn::Add(g, voff);
      const V p = hn::Mul(dyv, g);
      if constexpr (kCastThenScale) {
        // torch: the gradient reaching h_cast (a tensor of x's dtype) is
        // (dy * weight).to(T), the product in Dy (T, or float32 for a
        // float32 weight with 16-bit x: then this is the only rounding).
        static_assert(std::is_same_v<Dy, T> || std::is_same_v<Dy, float>);
        return RoundTo<T>(d, p);
      } else {
        return p;
      }
    };
    // Pass A: the canonical sum of dh * xf; on the way, the dgamma terms.
    const auto term = [&](auto dd, size_t i, size_t n, V xv, V dyv, V g) {
      const V xf = xf_of(xv);
      V gterm;
      if constexpr (kCastThenScale) {
        gterm = RoundTo<Dy>(dd, hn::Mul(dyv, RoundTo<T>(dd, xf)));
      } else {
        gterm = hn::Mul(dyv, xf);
      }
      (void)n;
      hn::Store(hn::Add(hn::Load(dd, partial + i), gterm), dd, partial + i);
      const V dh = dh_of(dyv, g);
      hn::Store(xf, dd, xf_row + i);
      hn::Store(dh, dd, dh_row + i);
      return hn::Mul(dh, xf);
    };
    const auto full_term = [&](auto dd, size_t i) {
      return term(dd, i, N, LoadF32(dd, x + i), LoadF32(dd, dy + i), LoadF32(dd, gamma + i));
    };
    const auto partial_term = [&](auto dd, size_t i, size_t n) {
      return term(dd, i, n, LoadF32Partial(dd, x + i, n), LoadF32Partial(dd, dy + i, n),
                  LoadF32Partial(dd, gamma + i, n));
    };
    // [0, pair_end) of the row in the pair layout: dh as packed bf16 words
    // (PackBf16's order) at dh_row, xf not kept.
    bool pair_row = false;
    float s;
#if GLMNORM_HAVE_BF16_PAIRS
    if constexpr (kPairTypes) {
      // prescale 1: then x * prescale * r is x * r, bit for bit. Streaming
      // pair stores need dx 64-byte aligned (the rows of an aligned tensor).
      if (pair_end != 0 && inv.prescale == 1.0f &&
          (!stream || reinterpret_cast<uintptr_t>(dx) % 64 == 0)) {
        __m512i x_bits = _mm512_set1_epi32(-1), dy_bits = x_bits, top = _mm512_setzero_si512();
        for (size_t i = 0; i < pair_end; i += 32) {
          const __m512i xv = _mm512_loadu_si512(x + i), dyv = _mm512_loadu_si512(dy + i);
          x_bits = MinNonzeroBits(x_bits, xv);
          dy_bits = MinNonzeroBits(dy_bits, dyv);
          top = _mm512_max_epu16(
              top, _mm512_max_epu16(_mm512_add_epi16(xv, xv), _mm512_add_epi16(dyv, dyv)));
        }
        pair_row = !gamma_nan && MaxWord(top) <= kDoubledInf &&
                   BackwardPairRowOk(AbsOfMinBits(MinWord(x_bits)), AbsOfMinBits(MinWord(dy_bits)),
                                     inv.r, gamma_min);
      }
    }
    if constexpr (kPairTypes) {
      if (pair_row) {
        const __m512 vr512 = vr.raw, voff512 = voff.raw;
        uint16_t* HWY_RESTRICT dh_words = reinterpret_cast<uint16_t*>(dh_row);
        CanonicalSumSteps<decltype(d), true> steps(d);
        // The same float32 operations on each element as `term`, in pairs.
        // Pass B gets dh as the packed bf16 words (dh is a bf16 value) and
        // recomputes xf = x * r from x: 2 bytes of workspace per value
        // written and read instead of 8 (xf and dh as float32).
        const auto pair_term = [&](size_t i) GLMNORM_INLINE_LAMBDA {
          const Bf16Pairs xv = LoadBf16Pairs(x + i), dyv = LoadBf16Pairs(dy + i);
          Bf16Pairs g = LoadBf16Pairs(gamma + i);
          if (has_offset) g = {_mm512_add_ps(g.even, voff512), _mm512_add_ps(g.odd, voff512)};
          const __m512 xf_even = _mm512_mul_ps(xv.even, vr512);
          const __m512 xf_odd = _mm512_mul_ps(xv.odd, vr512);
          const Bf16Pairs txf = WidenPacked(PackBf16(xf_odd, xf_even), to_even, to_odd);
          const __m512i gterm =
              PackBf16(_mm512_mul_ps(dyv.odd, txf.odd), _mm512_mul_ps(dyv.even, txf.even));
          // dgamma terms in memory order (the partials' layout).
          const __m512 g_lo =
              _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighWords, to_lo, gterm));
          const __m512 g_hi =
              _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kHighWords, to_hi, gterm));
          _mm512_store_ps(partial + i, _mm512_add_ps(_mm512_load_ps(partial + i), g_lo));
          _mm512_store_ps(partial + i + 16, _mm512_add_ps(_mm512_load_ps(partial + i + 16), g_hi));
          const __m512i dh_packed =
              PackBf16(_mm512_mul_ps(dyv.odd, g.odd), _mm512_mul_ps(dyv.even, g.even));
          _mm512_store_si512(dh_words + i, dh_packed);
          const Bf16Pairs dh = WidenPacked(dh_packed, to_even, to_odd);
          return Bf16Pairs{_mm512_mul_ps(dh.even, xf_even), _mm512_mul_ps(dh.odd, xf_odd)};
        };
        for (size_t base = 0; base < block_end; base += kBlock)
          steps.BlockOfPairs(d, base, pair_term);
        s = steps.FinishWith(d, block_end, width, pair_term, full_term, partial_term);
      }
    }
#endif
    if (!pair_row) s = CanonicalSum(d, width, full_term, partial_term);
    const V vc = hn::Set(d, s / static_cast<float>(width));
    // Pass B: dx = rr * (dh - xf * c) [+ dres].
    const char* dres = job.dres == nullptr
                           ? nullptr
                           : static_cast<const char*>(job.dres) +
                                 job.dres_rows.Offset(row) * static_cast<int64_t>(dres_size);
    char* dx2 = job.dx2 == nullptr ? nullptr
                                   : static_cast<char*>(job.dx2) +
                                         job.dx2_rows.Offset(row) * static_cast<int64_t>(dx2_size);
    const auto value = [&](size_t i) {
      return hn::Mul(vrr, hn::Sub(hn::LoadU(d, dh_row + i), hn::Mul(hn::LoadU(d, xf_row + i), vc)));
    };
    // dx from v (dx's values i .. i + n - 1) with dres and dx2.
    const auto store_general = [&](size_t i, V v, size_t n) {
      if (dres != nullptr) {
        if (job.round_before_dres) v = RoundTo<Dx>(d, v);
        v = hn::Add(v, LoadAny(d, job.dx_type, dres + i * dres_size, n));
      }
      if (n == N) {
        StoreF32As(d, v, dx + i);
      } else {
        StoreF32AsPartial(d, v, dx + i, n);
      }
      if (dx2 != nullptr) StoreAny(d, v, job.dx2_type, dx2 + i * dx2_size, n);
    };
    size_t i = 0;
#if GLMNORM_HAVE_BF16_PAIRS
    if constexpr (kPairTypes) {
      if (pair_row) {
        // The same operations as `value`, on the pair layout of pass A, with
        // xf = x * r computed again as pass A did.
        const uint16_t* HWY_RESTRICT dh_words = reinterpret_cast<const uint16_t*>(dh_row);
        const auto pair_value = [&](__m512 dh, __m512 xv) {
          return _mm512_mul_ps(vrr.raw,
                               _mm512_sub_ps(dh, _mm512_mul_ps(_mm512_mul_ps(xv, vr.raw), vc.raw)));
        };
        const bool plain = dres == nullptr && dx2 == nullptr;
        for (; i < pair_end; i += 32) {
          const Bf16Pairs xv = LoadBf16Pairs(x + i);
          const Bf16Pairs dh = WidenPacked(_mm512_load_si512(dh_words + i), to_even, to_odd);
          const Bf16Pairs v = {pair_value(dh.even, xv.even), pair_value(dh.odd, xv.odd)};
          if (plain) {
            if (stream) {
              StoreBf16Pairs<true>(v, dx + i);
            } else {
              StoreBf16Pairs<false>(v, dx + i);
            }
          } else {
            __m512 lo, hi;
            PairsInMemoryOrder(v, &lo, &hi);
            store_general(i, V{lo}, N);
            store_general(i + 16, V{hi}, N);
          }
        }
      }
    }
#endif
    if (dres == nullptr && dx2 == nullptr) {
      // The plain RmsNormBackward loop: no per-vector checks. Large outputs
      // go out with streaming stores from the first vector-aligned element
      // of dx (as the forward's, rms_norm_cpu.cc): no read of each dx line.
      // (After pair blocks, dx + i is 64-byte aligned.)
      if (stream) {
        constexpr size_t kVecBytes = N * sizeof(Dx);
        const size_t mis = reinterpret_cast<uintptr_t>(dx + i) % kVecBytes;
        const size_t head =
            std::min(width - i, mis == 0 ? size_t{0} : (kVecBytes - mis) / sizeof(Dx));
        if (head != 0) {
          StoreF32AsPartial(d, value(i), dx + i, head);
          i += head;
        }
        for (; i + N <= width; i += N) StoreF32As<true, true>(d, value(i), dx + i);
      } else {
        for (; i + N <= width; i += N) StoreF32As(d, value(i), dx + i);
      }
    }
    for (; i < width; i += N) store_general(i, value(i), std::min(N, width - i));
  };
  if (job.rstd != nullptr) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      backward_row(row, InvRms{job.rstd[row * job.rstd_stride], 1.0f, true});
    }
  } else {
    // The forward's row loop of 1/rms (row_batch-inl.h): heads of 128 are
    // reduced 16 at a time, and each row's reduction overlaps the row
    // before. Same bits as RowInverseRms row by row.
    ForEachRowInvRms<T>(
        d, width, job.p.eps, row_begin, row_end,
        [&job](int64_t row) { return static_cast<const T*>(job.x) + job.x_rows.Offset(row); },
        backward_row);
  }
  if (stream) hwy::FlushStream();
}

template <typename T, typename W, typename Dy, typename Dx, bool kCast>
HWY_NOINLINE void BackwardBlocksTyped(const RmsNormBackwardJob& job, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) BackwardBlock<T, W, Dy, Dx, kCast>(job, b);
}

void RmsNormBackwardBlocks(const RmsNormBackwardJob& job, int64_t block_begin,
                           int64_t block_end) {
  const NormParams& p = job.p;
  WithFloatType(p.x_type, [&](auto t_tag) {
    using T = typename decltype(t_tag)::type;
    WithFloatType(p.w_type, [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      const auto with_dx = [&](auto dy_tag, auto cast) {
        using Dy = typename decltype(dy_tag)::type;
        constexpr bool kCast = decltype(cast)::value;
        if (job.dx_type == DType::kF32) {
          BackwardBlocksTyped<T, W, Dy, float, kCast>(job, block_begin, block_end);
        } else {
          BackwardBlocksTyped<T, W, Dy, T, kCast>(job, block_begin, block_end);
        }
      };
      if (p.rounding == Rounding::kCastThenScale) {
        with_dx(std::type_identity<PromotedT<W, T>>{}, std::true_type{});
      } else if (p.y_type == DType::kF32) {
        with_dx(std::type_identity<float>{}, std::false_type{});
      } else {
        with_dx(std::type_identity<T>{}, std::false_type{});
      }
    });
  });
}

// dgamma[j] = the sum over leaves of partials[b][j] as a pairwise tree fixed
// by the leaf count: leaves enter in order into a binary counter (two sums
// of 2^k leaves are added into one of 2^(k+1), left + right), and what is
// left is added from the last sum back to the first. Per column, lane by
// lane: the same bits on every target, and the error grows with
// log2(leaves), not with leaves. Columns [group_begin, group_end) x
// kDGammaColumns, each reduced alone: the thread split changes no bit.
void ReduceDGamma(const DGammaReduceJob& job, int64_t group_begin, int64_t group_end) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr size_t N = hn::MaxLanes(d);
  constexpr int kMaxLevels = 64;  // 2^64 blocks
  HWY_ALIGN float sums[kMaxLevels * N];
  int levels[kMaxLevels];
  static_assert(kDGammaColumns % N == 0, "a group is whole vectors");
  const size_t width = static_cast<size_t>(std::min(job.width, group_end * kDGammaColumns));
  for (size_t j = static_cast<size_t>(group_begin * kDGammaColumns); j < width; j += N) {
    int depth = 0;
    for (int64_t b = 0; b < job.leaves; ++b) {
      V v = hn::Load(d, job.partials + b * job.partial_stride + j);
      int level = 0;
      while (depth > 0 && levels[depth - 1] == level) {
        --depth;
        v = hn::Add(hn::Load(d, sums + depth * N), v);
        ++level;
      }
      hn::Store(v, d, sums + depth * N);
      levels[depth++] = level;
    }
    V acc = hn::Zero(d);
    if (depth > 0) {
      acc = hn::Load(d, sums + (depth - 1) * N);
      for (int k = depth - 2; k >= 0; --k) acc = hn::Add(hn::Load(d, sums + k * N), acc);
    }
    const size_t n = std::min(N, width - j);
    StoreAny(d, acc, job.dgamma_type,
             static_cast<char*>(job.dgamma) + j * SizeOf(job.dgamma_type), n);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glmnorm {
HWY_EXPORT(RmsNormBackwardBlocks);
HWY_EXPORT(ReduceDGamma);
void OpKernels<RmsNormBackwardJob>::CpuRows(const RmsNormBackwardJob& job, int64_t block_begin,
                                            int64_t block_end) {
  HWY_DYNAMIC_DISPATCH(RmsNormBackwardBlocks)(job, block_begin, block_end);
}
void OpKernels<DGammaReduceJob>::CpuRows(const DGammaReduceJob& job, int64_t group_begin,
                                         int64_t group_end) {
  HWY_DYNAMIC_DISPATCH(ReduceDGamma)(job, group_begin, group_end);
}
// Plain C++: a scan of one float per row gains nothing from SIMD targets.
void OpKernels<RstdCheckJob>::CpuRows(const RstdCheckJob& job, int64_t, int64_t) {
  for (int64_t r = 0; r < job.rows; ++r) {
    const float v = job.rstd[r * job.stride];
    if (v < 0.0f) {  // NaN passes
      *job.bad_row = r;
      *job.bad_value = v;
      return;
    }
  }
}
}  // namespace glmnorm
#endif  // HWY_ONCE
