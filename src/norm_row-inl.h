// Row building blocks of the decoder-path kernels (AddRmsNorm, QkNorm, the
// quantising norms), compiled once per SIMD target (see kernels_*.cc).
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

#include <limits>
#include <type_traits>

#include "kernel_args.h"
#include "simd_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

// Calls fn(std::type_identity<T>{}) for a float activation dtype.
template <class Fn>
HWY_INLINE void WithFloatType(DType t, const Fn& fn) {
  switch (t) {
    case DType::kBF16: return fn(std::type_identity<BF16>{});
    case DType::kF16: return fn(std::type_identity<F16>{});
    default: return fn(std::type_identity<float>{});
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
  const auto value = [&](hn::Vec<D> xv, hn::Vec<D> g) {
    // The offset is added only when non-zero, so a -0 gamma keeps its sign.
    if (has_offset) g = hn::Add(g, voff);
    if constexpr (kMayBeNaN) {
      if (has_prescale) xv = hn::Mul(xv, vpre);
    }
    const auto h = hn::Mul(xv, vr);
    if constexpr (kCastThenScale) {
      return hn::Mul(g, RoundTo<T, kMayBeNaN>(d, h));
    } else {
      return hn::Mul(h, g);
    }
  };
  size_t i = begin;
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
  ForEachNormVectorSpan<T, W, kCastThenScale, true>(d, 0, width, inv, gamma, weight_offset,
                                                    load, load_partial, sink);
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
  template <class D>
  HWY_INLINE void operator()(D d, size_t i, size_t n, hn::Vec<D> v) const {
    if (n == hn::MaxLanes(d)) {
      StoreF32As<kMayBeNaN, kStream>(d, v, y + i);
    } else {
      StoreF32AsPartial(d, v, y + i, n);
    }
  }
};

// ---------------------------------------------------------------- quantising

// NaN tests use hn::IsNaN: in Highway 1.0.3, Ne(t, t) is an ordered compare
// (_CMP_NEQ_OQ, false for NaN) on AVX2/AVX-512 but unordered on SSE4, and x86
// Min/Max return their second operand when either is NaN.

// int8: saturate(RNE(t)) to [-128, 127]; NaN gives 0.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> QuantizeI8(D d, hn::Vec<D> t) {
  const hn::RebindToSigned<D> di;
  auto r = hn::Round(t);
  r = hn::Min(hn::Max(r, hn::Set(d, -128.0f)), hn::Set(d, 127.0f));
  r = hn::IfThenElse(hn::IsNaN(t), hn::Zero(d), r);
  return hn::ConvertTo(di, r);
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
  const auto enc_sub =
      hn::BitCast(du, hn::ConvertTo(di, hn::Round(hn::Mul(a, hn::Set(d, 512.0f)))));
  auto enc = hn::IfThenElse(hn::RebindMask(du, hn::Lt(a, hn::Set(d, 0x1p-6f))), enc_sub,
                            enc_normal);
  enc = hn::IfThenElse(hn::RebindMask(du, is_nan), hn::Set(du, 0x7Fu), enc);
  return hn::BitCast(di, hn::Or(enc, sign));
}

// Stores n lanes of an int32 vector as bytes (values fit Q).
template <typename Q, class D>
HWY_INLINE void StoreBytes(D d, hn::Vec<hn::RebindToSigned<D>> v, Q* p, size_t n) {
  if (n == hn::MaxLanes(d)) {
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
template <typename V, bool kE4M3>
struct QuantSink {
  using Q = std::conditional_t<kE4M3, uint8_t, int8_t>;
  Q* q = nullptr;
  float scale = 1.0f;
  template <class D>
  HWY_INLINE hn::Vec<D> Value(D d, hn::Vec<D> v) const {
    return RoundTo<V>(d, v);
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


// Quantises one row of y values to Q (QuantSink). With a dynamic scale a
// first sweep over `load` finds max|value| and the row's scale is written
// to scales[row]; then `store_load` (which may have side effects) feeds the
// quantising sweep. V: the dtype y is rounded to before quantising.
template <typename T, typename W, typename V, bool kCastThenScale, bool kE4M3, class D,
          class Load, class LoadPartial, class StoreLoad, class StoreLoadPartial>
HWY_INLINE void QuantizeRow(D d, size_t width, InvRms inv, const W* HWY_RESTRICT gamma,
                            float weight_offset, const QuantParams& qp, int64_t row, void* q,
                            const Load& load, const LoadPartial& load_partial,
                            const StoreLoad& store_load,
                            const StoreLoadPartial& store_load_partial) {
  QuantSink<V, kE4M3> sink;
  sink.q = static_cast<typename QuantSink<V, kE4M3>::Q*>(q);
  sink.scale = qp.scale;
  if (qp.dynamic) {
    // Only finite values count (NaN and inf are left out of the max); lanes
    // past the row end hold 0 or NaN, which leave it too.
    auto vmax = hn::Zero(d);
    ForEachNormVector<T, W, kCastThenScale>(
        d, width, inv, gamma, weight_offset, load, load_partial,
        [&vmax](auto dd, size_t, size_t, hn::Vec<D> v) {
          const auto a = hn::Abs(RoundTo<V>(dd, v));
          vmax = hn::Max(vmax, hn::IfThenElse(hn::IsFinite(a), a, hn::Zero(dd)));
        });
    HWY_ALIGN float lanes[hn::MaxLanes(d)];
    hn::Store(vmax, d, lanes);
    float max_abs = 0.0f;
    for (size_t k = 0; k < hn::MaxLanes(d); ++k) max_abs = lanes[k] > max_abs ? lanes[k] : max_abs;
    sink.scale = DynamicScale(max_abs, kE4M3);
    qp.scales[row] = sink.scale;
  }
  ForEachNormVector<T, W, kCastThenScale>(d, width, inv, gamma, weight_offset, store_load,
                                          store_load_partial, sink);
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
