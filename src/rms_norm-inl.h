// RmsNorm row kernels, compiled once per SIMD target (see kernels_*.cc).
//
// Two passes over a row: the canonical sum of squares, then y. The row is
// still in L1/L2 for the second pass, so memory sees one read and one write.

#if defined(GLMNORM_SRC_RMS_NORM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLMNORM_SRC_RMS_NORM_INL_H_
#undef GLMNORM_SRC_RMS_NORM_INL_H_
#else
#define GLMNORM_SRC_RMS_NORM_INL_H_
#endif

#include "kernel_args.h"
#include "simd_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glmnorm {
namespace HWY_NAMESPACE {

// y[i] for one vector of normalised values h = x * r (float32):
//   cast-then-scale: g * RoundTo<T>(h);  single-rounding: h * g.
// g already includes the weight offset.
template <typename T, bool kCastThenScale, class D>
HWY_INLINE hn::Vec<D> ScaleByGamma(D d, hn::Vec<D> h, hn::Vec<D> g) {
  if constexpr (kCastThenScale) {
    return hn::Mul(g, RoundTo<T>(d, h));
  } else {
    return hn::Mul(h, g);
  }
}

// Second pass over [begin, end) of a row: y = Scale((x * prescale) * r,
// gamma + offset). `load(d, i)` and `load_partial(d, i, n)` give the row's
// float32 input values, as in CanonicalSumOfSquares. The offset is added only
// when non-zero, so a -0 gamma keeps its sign as in the reference.
// kMayBeNaN false: the fast path, for rows where the caller knows no lane of
// x*r or y is NaN and prescale is 1. true: the general path (NaN-safe
// rounding, rescaled rows).
// kStream: y + begin is aligned for streaming stores of whole vectors.
template <typename T, typename W, typename O, bool kCastThenScale, bool kMayBeNaN,
          bool kStream, class D, class Load, class LoadPartial>
HWY_INLINE void NormalizeSpan(D d, size_t begin, size_t end, InvRms inv,
                              const W* HWY_RESTRICT gamma, float weight_offset, O* y,
                              const Load& load, const LoadPartial& load_partial) {
  constexpr size_t N = hn::MaxLanes(d);
  const auto vr = hn::Set(d, inv.r);
  const auto vpre = hn::Set(d, inv.prescale);
  const bool has_prescale = inv.prescale != 1.0f;
  const auto voff = hn::Set(d, weight_offset);
  const bool has_offset = weight_offset != 0.0f;
  const auto compute = [&](auto xv, auto g) {
    if (has_offset) g = hn::Add(g, voff);
    if constexpr (kMayBeNaN) {  // the general path also serves rescaled rows
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
    StoreF32As<kMayBeNaN, kStream>(d, compute(load(d, i), LoadF32(d, gamma + i)), y + i);
  }
  if (i < end) {
    const size_t n = end - i;
    StoreF32AsPartial(d, compute(load_partial(d, i, n), LoadF32Partial(d, gamma + i, n)), y + i,
                      n);
  }
}

// The whole second pass of a row; with `stream`, the aligned middle of the
// row uses streaming stores.
template <typename T, typename W, typename O, bool kCastThenScale, bool kMayBeNaN, class D,
          class Load, class LoadPartial>
HWY_INLINE void NormalizeRow(D d, size_t width, InvRms inv, const W* HWY_RESTRICT gamma,
                             float weight_offset, O* y, bool stream, const Load& load,
                             const LoadPartial& load_partial) {
  if (!stream) {
    NormalizeSpan<T, W, O, kCastThenScale, kMayBeNaN, false>(d, 0, width, inv, gamma,
                                                             weight_offset, y, load, load_partial);
    return;
  }
  constexpr size_t kVecBytes = hn::MaxLanes(d) * sizeof(O);
  const size_t misalign = reinterpret_cast<uintptr_t>(y) % kVecBytes;
  const size_t head = std::min(width, misalign ? (kVecBytes - misalign) / sizeof(O) : 0);
  const size_t body_end = head + (width - head) / hn::MaxLanes(d) * hn::MaxLanes(d);
  NormalizeSpan<T, W, O, kCastThenScale, kMayBeNaN, false>(d, 0, head, inv, gamma, weight_offset,
                                                           y, load, load_partial);
  NormalizeSpan<T, W, O, kCastThenScale, kMayBeNaN, true>(d, head, body_end, inv, gamma,
                                                          weight_offset, y, load, load_partial);
  NormalizeSpan<T, W, O, kCastThenScale, kMayBeNaN, false>(d, body_end, width, inv, gamma,
                                                           weight_offset, y, load, load_partial);
}

template <typename T, typename W, typename O, bool kCastThenScale>
void RmsNormRowsTyped(const RmsNormJob& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  const W* gamma = static_cast<const W*>(job.gamma);
  // A non-finite gamma can make y NaN from finite x: take the NaN-safe path.
  const bool gamma_finite = AllFinite(d, gamma, width);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* x = static_cast<const T*>(job.x) + job.x_rows.Offset(row);
    O* y = static_cast<O*>(job.y) + job.y_rows.Offset(row);
    const auto load = [x](auto dd, size_t i) { return LoadF32(dd, x + i); };
    const auto load_partial = [x](auto dd, size_t i, size_t n) {
      return LoadF32Partial(dd, x + i, n);
    };
    const InvRms inv = RowInverseRms(d, width, job.p.eps, load, load_partial);
    if (HWY_LIKELY(gamma_finite && inv.finite_row && std::isfinite(inv.r) &&
                   inv.prescale == 1.0f)) {
      NormalizeRow<T, W, O, kCastThenScale, false>(d, width, inv, gamma, job.p.weight_offset, y,
                                                   job.stream, load, load_partial);
    } else {
      NormalizeRow<T, W, O, kCastThenScale, true>(d, width, inv, gamma, job.p.weight_offset, y,
                                                  job.stream, load, load_partial);
    }
  }
  if (job.stream) hwy::FlushStream();
}

// PyTorch's result type of gamma (W) times input (T): equal types stay, any
// mix is float32.
template <typename W, typename T>
using PromotedType = std::conditional_t<std::is_same_v<W, T>, T, float>;

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
      F<T, W, PromotedType<W, T>, true>::Run(args...);
    } else if (p.y_type == DType::kF32) {
      F<T, W, float, false>::Run(args...);
    } else {
      F<T, W, T, false>::Run(args...);
    }
  };
  const auto with_w = [&](auto t_tag) {
    switch (p.w_type) {
      case DType::kBF16: return with_types(t_tag, std::type_identity<BF16>{});
      case DType::kF16: return with_types(t_tag, std::type_identity<F16>{});
      default: return with_types(t_tag, std::type_identity<float>{});
    }
  };
  switch (p.x_type) {
    case DType::kBF16: return with_w(std::type_identity<BF16>{});
    case DType::kF16: return with_w(std::type_identity<F16>{});
    default: return with_w(std::type_identity<float>{});
  }
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

#endif  // per-target include guard
