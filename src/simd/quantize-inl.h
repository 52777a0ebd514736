// The quantisers of the quantised norms (quant.h): int8 and OCP e4m3fn
// codes, the dynamic per-token scale, and QuantizeRow, which feeds a row's y
// values to them. Compiled once per SIMD target.

#if defined(GLMNORM_SRC_SIMD_QUANTIZE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_SIMD_QUANTIZE_INL_H_
#undef GLMNORM_SRC_SIMD_QUANTIZE_INL_H_
#else
#define GLMNORM_SRC_SIMD_QUANTIZE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/job.h"
#include "simd/convert-inl.h"
#include "simd/norm_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

// NaN tests use hn::IsNaN: in Highway 1.0.3, Ne(t, t) is an ordered compare
// (_CMP_NEQ_OQ, false for NaN) on AVX2/AVX-512 but unordered on SSE4, and x86
// Min/Max return their second operand when either is NaN.

// RNE(t) as int32, for |t| < 2^31 or lanes the caller overwrites (NaN).
// Why: on AVX-512 one VCVTPS2DQ with embedded round-to-nearest-even does
// it. Highway 1.0.3's Round then ConvertTo costs six instructions (a
// rounding, a truncating conversion and four that fix overflowed lanes), and
// the quantisers are bound by the two 512-bit ALU ports (docs/PERFORMANCE.md).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> RoundToInt32(D d, hn::Vec<D> t) {
  (void)d;  // used only on AVX3
#if HWY_TARGET == HWY_AVX3 && HWY_ARCH_X86_64
  if constexpr (hn::MaxLanes(d) == 16) {
    return hn::Vec<hn::RebindToSigned<D>>{
        _mm512_cvt_roundps_epi32(t.raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
  }
#endif
  return hn::ConvertTo(hn::RebindToSigned<D>(), hn::Round(t));
}

// int8: saturate(RNE(t)) to [-128, 127]; NaN gives 0. Clamping before
// rounding gives the same codes (the bounds are integers) and keeps t in
// RoundToInt32's range.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> QuantizeI8(D d, hn::Vec<D> t) {
  const hn::RebindToSigned<D> di;
  const auto clamped = hn::Min(hn::Max(t, hn::Set(d, -128.0f)), hn::Set(d, 127.0f));
  return hn::IfThenZeroElse(hn::RebindMask(di, hn::IsNaN(t)), RoundToInt32(d, clamped));
}

// OCP e4m3fn bits (in the low byte of each lane): saturating to +-448, RNE,
// subnormals kept, NaN -> 0x7F with t's sign, -0 -> 0x80.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> QuantizeE4M3(D d, hn::Vec<D> t) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto u = hn::BitCast(du, t);
  const auto sign = hn::And(hn::ShiftRight<24>(u), hn::Set(du, 0x80u));
  const auto is_nan = hn::IsNaN(t);
  const auto a = hn::Min(hn::Abs(t), hn::Set(d, 448.0f));
  const auto au = hn::BitCast(du, a);
  // Normal range (a >= 2^-6): round the float32 mantissa to 3 bits (RNE),
  // then rebias the exponent from 127 to 7: bits >> 20 minus (120 << 3).
  const auto lsb = hn::And(hn::ShiftRight<20>(au), hn::Set(du, 1u));
  const auto rounded =
      hn::And(hn::Add(hn::Add(au, hn::Set(du, 0x7FFFFu)), lsb), hn::Set(du, 0xFFF00000u));
  const auto enc_normal = hn::Sub(hn::ShiftRight<20>(rounded), hn::Set(du, 960u));
  // Subnormal range: the encoding is RNE(a * 2^9) (8 = the smallest normal).
  const auto enc_sub = hn::BitCast(du, RoundToInt32(d, hn::Mul(a, hn::Set(d, 512.0f))));
  auto enc = hn::IfThenElse(hn::RebindMask(du, hn::Lt(a, hn::Set(d, 0x1p-6f))), enc_sub,
                            enc_normal);
  enc = hn::IfThenElse(hn::RebindMask(du, is_nan), hn::Set(du, 0x7Fu), enc);
  return hn::BitCast(di, hn::Or(enc, sign));
}

// Stores n lanes of an int32 vector as bytes (values fit Q: int8 codes, or
// e4m3 codes 0..255, so keeping the low byte is exact).
template <typename Q, class D>
HWY_INLINE void StoreBytes(D d, hn::Vec<hn::RebindToSigned<D>> v, Q* p, size_t n) {
  if (n == hn::MaxLanes(d)) {
#if HWY_TARGET == HWY_AVX3 && HWY_ARCH_X86_64
    if constexpr (hn::MaxLanes(d) == 16) {
      // VPMOVDB: one truncating instruction; Highway 1.0.3's DemoteTo to 8
      // bits is a saturating pack and a cross-lane permute.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v.raw));
      return;
    }
#endif
    const hn::Rebind<Q, D> dq;
    hn::StoreU(hn::DemoteTo(dq, v), dq, p);
    return;
  }
  const hn::RebindToSigned<D> di;
  HWY_ALIGN int32_t buf[hn::MaxLanes(d)];
  hn::Store(v, di, buf);
  for (size_t k = 0; k < n; ++k) p[k] = static_cast<Q>(buf[k]);
}

// Quantises y rounded to V (the dtype RmsNorm would store), Q = int8_t for
// i8 or uint8_t for e4m3. With a dynamic scale the row is first Observe()d.
template <typename V, bool kE4M3, bool kMayBeNaN = true>
struct QuantSink {
  using Q = std::conditional_t<kE4M3, uint8_t, int8_t>;
  Q* q = nullptr;
  float scale = 1.0f;
  template <class D>
  HWY_INLINE hn::Vec<D> Value(D d, hn::Vec<D> v) const {
    return RoundTo<V, kMayBeNaN>(d, v);
  }
  template <class D>
  HWY_INLINE void operator()(D d, size_t i, size_t n, hn::Vec<D> v) const {
    const auto t = hn::Div(Value(d, v), hn::Set(d, scale));
    const auto enc = kE4M3 ? QuantizeE4M3(d, t) : QuantizeI8(d, t);
    StoreBytes(d, enc, q + i, n);
  }
};

constexpr float QMax(bool e4m3) { return e4m3 ? 448.0f : 127.0f; }

// The dynamic scale of a row (quant.h): max|v| / qmax over the finite v,
// at least 2^-126 (a normal float32, so v / scale never overflows and the
// scale has full precision), at most the largest scale with qmax * scale
// finite; 1 when no finite v is non-zero.
HWY_INLINE float DynamicScale(float max_abs, bool e4m3) {
  if (!(max_abs > 0.0f)) return 1.0f;
  const float qmax = QMax(e4m3);
  float scale = std::max(max_abs / qmax, std::numeric_limits<float>::min());
  if (std::isinf(scale * qmax)) scale = std::nextafter(scale, 0.0f);
  return scale;
}


// Rows up to this width keep their values in a stack buffer (32 KiB)
// between the two sweeps of a dynamic scale, so y is computed once: every
// GLM-4.5 width (5120, 4096, head_dim 128) fits. Wider rows compute y twice.
constexpr size_t kQuantScratchFloats = 8192;

// Quantises one row of y values to Q (QuantSink). With a dynamic scale a
// first sweep finds max|value| and the row's scale is written to
// scales[row]; then the values are quantised. `store_load` (which may have
// side effects, such as storing the residual) is called exactly once per
// index; `load` only when the row is too wide for the scratch buffer.
// V: the dtype y is rounded to before quantising. kMayBeNaN as in
// ForEachNormVectorSpan (false on the fast path: no NaN in x*r or y).
template <typename T, typename W, typename V, bool kCastThenScale, bool kE4M3, bool kMayBeNaN,
          class D, class Load, class LoadPartial, class StoreLoad, class StoreLoadPartial>
HWY_INLINE void QuantizeRow(D d, size_t width, InvRms inv, const W* HWY_RESTRICT gamma,
                            float weight_offset, const QuantParams& qp, int64_t row, void* q,
                            const Load& load, const LoadPartial& load_partial,
                            const StoreLoad& store_load,
                            const StoreLoadPartial& store_load_partial) {
  constexpr size_t N = hn::MaxLanes(d);
  QuantSink<V, kE4M3, kMayBeNaN> sink;
  sink.q = static_cast<typename QuantSink<V, kE4M3, kMayBeNaN>::Q*>(q);
  sink.scale = qp.scale;
  const auto sweep = [&](const auto& ld, const auto& ld_partial, const auto& sk) {
    ForEachNormVectorSpan<T, W, kCastThenScale, kMayBeNaN>(d, 0, width, inv, gamma,
                                                           weight_offset, ld, ld_partial, sk);
  };
  if (!qp.dynamic) {
    sweep(store_load, store_load_partial, sink);
    return;
  }
  // Only finite values count (NaN and inf are left out of the max); lanes
  // past the row end hold 0 or NaN, which leave it too.
  auto vmax = hn::Zero(d);
  const auto observe = [&vmax](D dd, hn::Vec<D> value) {
    const auto a = hn::Abs(value);
    vmax = hn::Max(vmax, hn::IfThenElse(hn::IsFinite(a), a, hn::Zero(dd)));
  };
  const auto set_scale = [&] {
    HWY_ALIGN float lanes[N];
    hn::Store(vmax, d, lanes);
    float max_abs = 0.0f;
    for (size_t k = 0; k < N; ++k) max_abs = lanes[k] > max_abs ? lanes[k] : max_abs;
    sink.scale = DynamicScale(max_abs, kE4M3);
    qp.scales[row * qp.scales_stride] = sink.scale;
  };
  if (width <= kQuantScratchFloats) {
    // width <= 8192 and N divides 8192: whole-vector stores stay inside.
    HWY_ALIGN float values[kQuantScratchFloats];
    sweep(store_load, store_load_partial, [&](D dd, size_t i, size_t, hn::Vec<D> v) {
      const auto value = RoundTo<V, kMayBeNaN>(dd, v);
      hn::Store(value, dd, values + i);
      observe(dd, value);
    });
    set_scale();
    const auto vscale = hn::Set(d, sink.scale);
    auto* out = sink.q;
    size_t i = 0;
    for (; i + N <= width; i += N) {
      const auto t = hn::Div(hn::Load(d, values + i), vscale);
      StoreBytes(d, kE4M3 ? QuantizeE4M3(d, t) : QuantizeI8(d, t), out + i, N);
    }
    if (i < width) {
      const auto t = hn::Div(hn::Load(d, values + i), vscale);
      StoreBytes(d, kE4M3 ? QuantizeE4M3(d, t) : QuantizeI8(d, t), out + i, width - i);
    }
    return;
  }
  sweep(load, load_partial,
        [&](D dd, size_t, size_t, hn::Vec<D> v) { observe(dd, RoundTo<V, kMayBeNaN>(dd, v)); });
  set_scale();
  sweep(store_load, store_load_partial, sink);
}

}  // namespace HWY_NAMESPACE
}  // namespace glmnorm
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
