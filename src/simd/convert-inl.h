// Conversions shared by every kernel, compiled once per SIMD target (each
// op's <op>_cpu.cc includes it through foreach_target.h): float32 loads and
// stores of every dtype with the library's own round-to-nearest-even
// (Highway 1.0.3's demotions truncate, and its f16 emulation on SSE4/scalar
// is wrong), and the finiteness scan of the fast path.

// Per-target include guard (Highway's pattern).
#if defined(GLMNORM_SRC_SIMD_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_CONVERT_INL_H_
#undef GLMNORM_SRC_SIMD_CONVERT_INL_H_
#else
#define GLMNORM_SRC_SIMD_CONVERT_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cpu_features.h"
#include "glmnorm/dtype.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using BF16 = hwy::bfloat16_t;
using F16 = hwy::float16_t;

// F16C (AVX2 and AVX-512 targets) converts f16 exactly; elsewhere we go
// through the scalar conversions of dtype.cc.
#if HWY_TARGET <= HWY_AVX2 && HWY_ARCH_X86
constexpr bool kNativeF16 = true;
#else
constexpr bool kNativeF16 = false;
#endif

// ---------------------------------------------------------------- scalars

inline float ToF32(float v) { return v; }
inline float ToF32(BF16 v) { return F32FromBF16(v.bits); }
inline float ToF32(F16 v) { return F32FromF16(v.bits); }

inline void FromF32(float v, float* out) { *out = v; }
inline void FromF32(float v, BF16* out) { out->bits = BF16FromF32(v); }
inline void FromF32(float v, F16* out) { out->bits = F16FromF32(v); }

// ---------------------------------------------------------------- loads

template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const BF16* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<BF16, D>(), p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const F16* p) {
  if constexpr (kNativeF16) {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<F16, D>(), p));
  } else {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    for (size_t i = 0; i < hn::MaxLanes(d); ++i) buf[i] = ToF32(p[i]);
    return hn::Load(d, buf);
  }
}

// Loads n < Lanes(d) elements; the other lanes are zero.
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadF32Partial(D d, const T* p, size_t n) {
  HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
  for (size_t i = 0; i < n; ++i) buf[i] = ToF32(p[i]);
  return hn::Load(d, buf);
}

// ---------------------------------------------------------------- rounding

// AVX512-BF16 (see core/cpu_features.h): VCVTNEPS2BF16 rounds 16 floats to
// bf16, nearest even, in one instruction, where the portable rounding below
// takes about eight. Highway 1.0.3 has no target for it and the AVX3 target's
// pragma does not enable it, so it is emitted as inline asm (which needs no
// target attribute) and run only when g_native_bf16 says the CPU has it.
// It differs from the library's rounding in one way: it treats subnormal
// inputs as zero. Those lanes (exponent 0, mantissa not 0) take the portable
// rounding, so a subnormal bf16 result stays subnormal. NaN: it returns the
// input's high half with the quiet bit set, as the portable rounding does.
#undef GLMNORM_HAVE_NATIVE_BF16  // defined once per target
#if HWY_TARGET == HWY_AVX3 && HWY_ARCH_X86_64
#define GLMNORM_HAVE_NATIVE_BF16 1
HWY_INLINE __m256i NativeBF16(__m512 v) {
  __m256i r;
  asm("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(v));
  return r;
}
// Lanes holding a subnormal float (the instruction would flush them): one
// VFPCLASSPS (AVX512DQ, in the AVX3 target), category 0x20 = denormal.
HWY_INLINE __mmask16 SubnormalLanes(__m512 v) { return _mm512_fpclass_ps_mask(v, 0x20); }
#else
#define GLMNORM_HAVE_NATIVE_BF16 0
#endif

// bf16 round-to-nearest-even of each lane, as float32 bits in the upper half
// (lower 16 bits zero); NaN stays a quiet NaN of the same sign. Portable.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> PortableRoundedBF16Bits(D /*d*/, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), lsb);
  const auto quiet = hn::Or(u, hn::Set(du, 0x00400000u));
  const auto is_nan =
      hn::Gt(hn::BitCast(di, hn::And(u, hn::Set(du, 0x7FFFFFFFu))), hn::Set(di, 0x7F800000));
  const auto bits = hn::IfThenElse(hn::RebindMask(du, is_nan), quiet, rounded);
  return hn::And(bits, hn::Set(du, 0xFFFF0000u));
}

// The same, natively where the CPU allows it.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundedBF16Bits(D d, hn::Vec<D> v) {
#if GLMNORM_HAVE_NATIVE_BF16
  if constexpr (hn::MaxLanes(d) == 16) {
    if (g_native_bf16 && HWY_LIKELY(SubnormalLanes(v.raw) == 0)) {
      const __m512i wide = _mm512_cvtepu16_epi32(NativeBF16(v.raw));
      return hn::Vec<hn::RebindToUnsigned<D>>{_mm512_slli_epi32(wide, 16)};
    }
  }
#endif
  return PortableRoundedBF16Bits(d, v);
}

// The same for lanes known not to be NaN (inf is fine): 4 integer ops.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> RoundedBF16BitsNoNaN(D d, hn::Vec<D> v) {
  // Four integer ops: cheaper than the native conversion and its widening
  // back to 32 bits, so this stays portable on every target.
  (void)d;
  const hn::RebindToUnsigned<D> du;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  return hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), lsb);  // low 16 bits: garbage
}

// Rounds each lane to T and back (the reference's cast to the input dtype).
// kMayBeNaN false: the caller guarantees no lane is NaN (faster bf16 path).
template <typename T, bool kMayBeNaN = true, class D>
HWY_INLINE hn::Vec<D> RoundTo(D d, hn::Vec<D> v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, BF16>) {
    if constexpr (kMayBeNaN) return hn::BitCast(d, RoundedBF16Bits(d, v));
    const hn::RebindToUnsigned<D> du;
    return hn::BitCast(d, hn::And(RoundedBF16BitsNoNaN(d, v), hn::Set(du, 0xFFFF0000u)));
  } else if constexpr (kNativeF16) {
    return hn::PromoteTo(d, hn::DemoteTo(hn::Rebind<F16, D>(), v));
  } else {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    hn::Store(v, d, buf);
    for (size_t i = 0; i < hn::MaxLanes(d); ++i) buf[i] = F32FromF16(F16FromF32(buf[i]));
    return hn::Load(d, buf);
  }
}

// ---------------------------------------------------------------- stores

// Whether a vector of 16-bit values of D's lane count can be streamed:
// Highway 1.0.3's Stream of a vector narrower than 16 bytes (4 bf16 lanes on
// SSE4: 8 bytes) is a 16-byte _mm_stream_si128, which writes past the
// vector and faults unless 16-byte aligned. Such vectors use plain stores.
template <class D>
inline constexpr bool kCanStream16 = hn::MaxLanes(D()) * 2 >= 16;

// StoreF32As(d, v, p): rounds v to the storage type of p and stores it.
// kMayBeNaN as in RoundTo. kStream: non-temporal store (p must be aligned to
// the stored vector's size); large outputs skip the cache-line reads that a
// normal store costs, like memcpy's rep movsb does.
template <bool kMayBeNaN = true, bool kStream = false, class D>
HWY_INLINE void StoreF32As(D d, hn::Vec<D> v, float* p) {
  if constexpr (kStream) {
    hn::Stream(v, d, p);
  } else {
    hn::StoreU(v, d, p);
  }
}
// `native`: g_native_bf16, read once by a caller that stores in a loop (a
// local the compiler keeps in a register, unlike the global, which it must
// reload after every store).
template <bool kMayBeNaN = true, bool kStream = false, class D>
HWY_INLINE void StoreF32As(D d, hn::Vec<D> v, BF16* p, bool native = g_native_bf16) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> du16;
  hn::Vec<hn::RebindToUnsigned<D>> high;
  bool may_be_nan = kMayBeNaN;
  (void)native;
#if GLMNORM_HAVE_NATIVE_BF16
  if constexpr (hn::MaxLanes(d) == 16) {
    if (native) {
      if (HWY_LIKELY(SubnormalLanes(v.raw) == 0)) {
        const __m256i packed = NativeBF16(v.raw);
        if constexpr (kStream) {
          _mm256_stream_si256(reinterpret_cast<__m256i*>(p), packed);
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
        }
        return;
      }
      // Rare subnormal lanes: the portable rounding, NaN-safe, because with
      // the native conversion the callers do not rule out NaN first
      // (FastPathNeedsFiniteGamma, norm_row-inl.h).
      may_be_nan = true;
    }
  }
#endif
  if (may_be_nan) {
    high = hn::ShiftRight<16>(PortableRoundedBF16Bits(d, v));
  } else {
    high = hn::ShiftRight<16>(RoundedBF16BitsNoNaN(d, v));
  }
  const auto packed = hn::DemoteTo(du16, hn::BitCast(di, high));
  auto* out = reinterpret_cast<uint16_t*>(p);
  if constexpr (kStream && kCanStream16<D>) {
    hn::Stream(packed, du16, out);
  } else {
    hn::StoreU(packed, du16, out);
  }
}
template <bool kMayBeNaN = true, bool kStream = false, class D>
HWY_INLINE void StoreF32As(D d, hn::Vec<D> v, F16* p) {
  if constexpr (kNativeF16) {
    const hn::Rebind<F16, D> df16;
    if constexpr (kStream && kCanStream16<D>) {
      hn::Stream(hn::DemoteTo(df16, v), df16, p);
    } else {
      hn::StoreU(hn::DemoteTo(df16, v), df16, p);
    }
  } else {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    hn::Store(v, d, buf);
    for (size_t i = 0; i < hn::MaxLanes(d); ++i) FromF32(buf[i], p + i);
  }
}

// ---------------------------------------------------------------- bf16 pairs

// 32 bf16 values as two float32 vectors (AVX3; issue 16 item 3). On CPUs
// whose 512-bit pipes are double-pumped (Zen 4), the 16-value loops are
// bound by vector instructions, and widening 16 bf16 values costs two that
// each take a multiply's slot (vpmovzxwd, vpslld; bench/bf16_convert_cost).
// One 64-byte load gives 32 values with a shift (the even-indexed elements)
// and a mask (the odd ones), and one vcvtne2ps2bf16 plus one word permute
// store 32 (two vcvtneps2bf16 store 16 each). Elementwise work keeps its
// bits in any lane order; the canonical sum permutes back before its tree
// (CanonicalSumSteps, reduction-inl.h).
#undef GLMNORM_HAVE_BF16_PAIRS  // defined once per target
#if GLMNORM_HAVE_NATIVE_BF16
#define GLMNORM_HAVE_BF16_PAIRS 1
struct Bf16Pairs {
  __m512 even, odd;  // elements 0, 2, ..., 30 and 1, 3, ..., 31
};

HWY_INLINE Bf16Pairs LoadBf16Pairs(const BF16* p) {
  const __m512i v = _mm512_loadu_si512(p);
  return {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
          _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int32_t(0xFFFF0000u))))};
}

// The 32 values of v in memory order as two float32 vectors, *lo the values
// 0..15 and *hi 16..31: an exact permutation (the canonical sum's,
// CanonicalSumSteps, and pair results stored through 16-value paths).
HWY_INLINE void PairsInMemoryOrder(const Bf16Pairs& v, __m512* lo, __m512* hi) {
  const __m512i lo_index = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_index =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  *lo = _mm512_permutex2var_ps(v.even, lo_index, v.odd);
  *hi = _mm512_permutex2var_ps(v.even, hi_index, v.odd);
}

// VCVTNE2PS2BF16: words 0..15 are `low` rounded to bf16, words 16..31
// `high` (nearest even; subnormal inputs become zero).
HWY_INLINE __m512i PackBf16(__m512 high, __m512 low) {
  __m512i packed;
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(packed) : "v"(high), "v"(low));
  return packed;
}

// Stores the 32 values rounded to bf16 in memory order: natively (only where
// g_native_bf16), unless a lane is subnormal (the instruction flushes
// those), and then with the portable NaN-safe rounding, as StoreF32As does
// for 16. kStream: p is 64-byte aligned, non-temporal store.
template <bool kStream>
HWY_INLINE void StoreBf16Pairs(const Bf16Pairs& y, BF16* p) {
  __m512i out;
  if (HWY_LIKELY((SubnormalLanes(y.even) | SubnormalLanes(y.odd)) == 0)) {
    // Words 0..15: the even elements, 16..31: the odd ones.
    const __m512i packed = PackBf16(y.odd, y.even);
    // Word 2m <- word m, word 2m + 1 <- word 16 + m.
    const __m512i interleave =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    out = _mm512_permutexvar_epi16(interleave, packed);
  } else {
    const hn::ScalableTag<float> d;
    const auto even = PortableRoundedBF16Bits(d, hn::Vec<decltype(d)>{y.even});
    const auto odd = PortableRoundedBF16Bits(d, hn::Vec<decltype(d)>{y.odd});
    out = _mm512_or_si512(odd.raw, _mm512_srli_epi32(even.raw, 16));
  }
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), out);
  } else {
    _mm512_storeu_si512(p, out);
  }
}

// ---------------------------------------------------------------- native bf16 rows

// Rows whose nonzero squares, h = x * r and outputs are all normal floats
// (NativeRowOk, norm_row-inl.h) take the AVX512-BF16 instructions further
// than the store: on Zen 4 the 32-value loops are bound by vector
// instructions (docs/PERFORMANCE.md), and these do the work of several.
// They flush subnormal inputs and results to zero, which is why the rows
// must be proven free of them; elsewhere they give the library's bits.
//
// VDPBF16PS: acc + a.hi * b.hi + a.lo * b.lo per 32-bit lane (hi, lo: its
// two bf16 words). With the other word of each lane masked to zero, it is
// acc + x * x: the product of two bf16 values is exact in float32, so the
// one rounding is Add's.
HWY_INLINE __m512 DotBf16(__m512 acc, __m512i a, __m512i b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// The running minimum, per 16-bit word, of 2 * |x| - 1 over bf16 words
// (doubling drops the sign; zero wraps to 0xFFFF): the smallest nonzero
// magnitude, decoded by AbsOfMinBits. NaN and inf words are the largest.
HWY_INLINE __m512i MinNonzeroBits(__m512i min_bits, __m512i v) {
  const __m512i doubled = _mm512_add_epi16(v, v);
  return _mm512_min_epu16(min_bits, _mm512_add_epi16(doubled, _mm512_set1_epi32(-1)));
}
HWY_INLINE uint16_t MinNonzeroBits(uint16_t min_bits, uint16_t v) {
  return std::min(min_bits, static_cast<uint16_t>(static_cast<uint16_t>(v << 1) - 1));
}
// The smallest of the 32 words of a MinNonzeroBits vector (PHMINPOSUW on
// the last 8).
HWY_INLINE uint16_t MinWord(__m512i min_bits) {
  const __m256i half =
      _mm256_min_epu16(_mm512_castsi512_si256(min_bits), _mm512_extracti64x4_epi64(min_bits, 1));
  const __m128i quarter =
      _mm_min_epu16(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
  return static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(quarter)));
}
// The smallest nonzero |x| from MinNonzeroBits' minimum (+inf when every
// value was zero).
HWY_INLINE float AbsOfMinBits(uint16_t min_bits) {
  if (min_bits == 0xFFFF) return std::numeric_limits<float>::infinity();
  return F32FromBF16(static_cast<uint16_t>((min_bits + 1u) >> 1));
}

// The lane order of NormalizeNativePairs (norm_row-inl.h). h = x * r is
// split as Bf16Pairs (even, odd elements); PackBf16(odd, even) holds element
// 2m at word m and 2m + 1 at word 16 + m. Unpacking that with zeros
// (vpunpck[lh]wd work within 128-bit quarters) gives the float32 vectors A
// (lane 4q + t from word 8q + t) and B (from word 8q + 4 + t), q, t < 4:
// gamma is permuted into that order, and one word permute puts
// PackBf16(y_B, y_A) back in memory order.
struct NativeOrder {
  uint16_t element[32];      // the element of a 32-value block in lane l of A (l < 16), B
  uint16_t packed_word[32];  // the word of PackBf16(y_B, y_A) that holds element e
  // Word permutes of 32 gamma words and a zero vector (words 32..63) into
  // float32 A and B: the high word of lane l is element[l], the low one 0.
  uint16_t gamma_a[32], gamma_b[32];
};
constexpr NativeOrder MakeNativeOrder() {
  NativeOrder o{};
  for (int l = 0; l < 32; ++l) {
    const int q = (l % 16) / 4, t = l % 4;
    const int word = 8 * q + t + (l < 16 ? 0 : 4);
    o.element[l] = static_cast<uint16_t>(word < 16 ? 2 * word : 2 * (word - 16) + 1);
    o.packed_word[o.element[l]] = static_cast<uint16_t>(l);
    uint16_t* gamma = l < 16 ? o.gamma_a : o.gamma_b;
    gamma[2 * (l % 16)] = 32;
    gamma[2 * (l % 16) + 1] = o.element[l];
  }
  return o;
}
inline constexpr NativeOrder kNativeOrder = MakeNativeOrder();

// The smallest nonzero |gamma + offset| of n bf16 values (the offset added
// only when non-zero, as the row loops do), +inf when none; NaN is skipped.
HWY_INLINE float MinNonzeroAbsOfGamma(const BF16* gamma, size_t n, float offset) {
  if (offset == 0.0f) {
    __m512i min_bits = _mm512_set1_epi32(-1);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) min_bits = MinNonzeroBits(min_bits, _mm512_loadu_si512(gamma + i));
    uint16_t m = MinWord(min_bits);
    for (; i < n; ++i) m = MinNonzeroBits(m, gamma[i].bits);
    return AbsOfMinBits(m);
  }
  // With an offset, in float32 as the row loops add it. min(|g|, m) keeps
  // m where either is NaN (vminps returns its second operand), so NaN never
  // enters m.
  const __m512 voff = _mm512_set1_ps(offset), zero = _mm512_setzero_ps();
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  __m512 min_abs = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const Bf16Pairs g = LoadBf16Pairs(gamma + i);
    for (__m512 half : {g.even, g.odd}) {
      half = _mm512_add_ps(half, voff);
      const __mmask16 nonzero = _mm512_cmp_ps_mask(half, zero, _CMP_NEQ_UQ);
      min_abs = _mm512_mask_min_ps(min_abs, nonzero, _mm512_and_ps(half, abs_mask), min_abs);
    }
  }
  float m = _mm512_reduce_min_ps(min_abs);
  for (; i < n; ++i) {
    const float g = std::fabs(F32FromBF16(gamma[i].bits) + offset);
    if (g != 0.0f && g < m) m = g;  // false for NaN
  }
  return m;
}

#else
#define GLMNORM_HAVE_BF16_PAIRS 0
#endif

// The pair layout on AVX2: 16 bf16 values per 32-byte load as two float32
// vectors of their even and odd elements, the lane order of the AVX3 pairs
// above. On CPUs whose 256-bit shifts take one pipe for two cycles (Zen 1:
// a 16-value widening by vpmovzxwd + vpslld took 4 of a shift and shuffle
// pipe's cycles per 8 values), a mask gives the odd elements and one byte
// shuffle the even ones (docs/PERFORMANCE.md, "AVX2 (Zen 1)").
// GLMNORM_HAVE_SQUARE_PAIRS: the target has a pair layout (either).
#undef GLMNORM_HAVE_SQUARE_PAIRS  // defined once per target
#if GLMNORM_HAVE_BF16_PAIRS
#define GLMNORM_HAVE_SQUARE_PAIRS 1
#elif HWY_TARGET == HWY_AVX2 && HWY_ARCH_X86_64
#define GLMNORM_HAVE_SQUARE_PAIRS 1
struct Bf16Pairs {
  __m256 even, odd;  // elements 0, 2, ..., 14 and 1, 3, ..., 15
};

HWY_INLINE Bf16Pairs LoadBf16Pairs(const BF16* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  // Each 32-bit lane's low word (an even element) into its high half.
  const __m256i to_high = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 4, 5, -1, -1, 8, 9, -1, -1, 12, 13,
                                           -1, -1, 0, 1, -1, -1, 4, 5, -1, -1, 8, 9, -1, -1, 12, 13);
  return {_mm256_castsi256_ps(_mm256_shuffle_epi8(v, to_high)),
          _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int32_t(0xFFFF0000u))))};
}

// Stores 16 values of y (no lane NaN; inf is fine) rounded to bf16 in memory
// order: the odd elements' rounded bits stay in the high words, the even
// ones' move to the low words. kStream: p is 32-byte aligned.
template <bool kStream>
HWY_INLINE void StoreBf16PairsNoNaN(const Bf16Pairs& y, BF16* p) {
  const hn::Full256<float> d;
  const __m256i even = RoundedBF16BitsNoNaN(d, hn::Vec<decltype(d)>{y.even}).raw;
  const __m256i odd = RoundedBF16BitsNoNaN(d, hn::Vec<decltype(d)>{y.odd}).raw;
  const __m256i out = _mm256_blend_epi16(odd, _mm256_srli_epi32(even, 16), 0x55);
  if constexpr (kStream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), out);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), out);
  }
}
#else
#define GLMNORM_HAVE_SQUARE_PAIRS 0
#endif

// StoreF32As for any storage type, with g_native_bf16 as read once by the
// caller (`native`, used for bf16 only).
template <bool kMayBeNaN = true, bool kStream = false, class D, typename O>
HWY_INLINE void StoreF32AsWith(D d, hn::Vec<D> v, O* p, bool native) {
  if constexpr (std::is_same_v<O, BF16>) {
    StoreF32As<kMayBeNaN, kStream>(d, v, p, native);
  } else {
    (void)native;
    StoreF32As<kMayBeNaN, kStream>(d, v, p);
  }
}

// Stores the first n < Lanes(d) lanes.
template <class D, typename T>
HWY_INLINE void StoreF32AsPartial(D d, hn::Vec<D> v, T* p, size_t n) {
  HWY_ALIGN float buf[hn::MaxLanes(d)];
  hn::Store(v, d, buf);
  for (size_t i = 0; i < n; ++i) FromF32(buf[i], p + i);
}

// True when no element of the n values at p is inf or NaN. 16-bit values
// are tested as words, without widening (a bf16 gamma is scanned once per
// call, as long as a decode row's pass 1 on AVX2 when it was widened).
template <class D, typename T>
HWY_INLINE bool AllFinite(D d, const T* p, size_t n) {
  if constexpr (sizeof(T) == 2 && hn::MaxLanes(D()) > 1) {  // not HWY_SCALAR
    const hn::Repartition<uint16_t, D> dw;
    constexpr size_t NW = hn::MaxLanes(dw);
    const uint16_t exp_bits = std::is_same_v<T, BF16> ? 0x7F80u : 0x7C00u;
    const auto exp_mask = hn::Set(dw, exp_bits);
    const auto* bits = reinterpret_cast<const uint16_t*>(p);
    auto bad = hn::Zero(dw);
    size_t i = 0;
    for (; i + NW <= n; i += NW) {
      bad = hn::Or(bad, hn::VecFromMask(dw, hn::Eq(hn::And(hn::LoadU(dw, bits + i), exp_mask),
                                                   exp_mask)));
    }
    bool finite = hn::AllTrue(dw, hn::Eq(bad, hn::Zero(dw)));
    for (; i < n; ++i) finite &= (bits[i] & exp_bits) != exp_bits;
    return finite;
  }

  constexpr size_t N = hn::MaxLanes(d);
  const hn::RebindToUnsigned<D> du;
  auto bad = hn::Zero(du);
  size_t i = 0;
  // |v| > max or NaN: the exponent field is all ones.
  const auto exp_mask = hn::Set(du, 0x7F800000u);
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(du, LoadF32(d, p + i));
    bad = hn::Or(bad, hn::VecFromMask(du, hn::Eq(hn::And(u, exp_mask), exp_mask)));
  }
  if (i < n) {
    const auto u = hn::BitCast(du, LoadF32Partial(d, p + i, n - i));
    bad = hn::Or(bad, hn::VecFromMask(du, hn::Eq(hn::And(u, exp_mask), exp_mask)));
  }
  return hn::AllTrue(du, hn::Eq(bad, hn::Zero(du)));
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
