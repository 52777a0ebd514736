// RmsNorm row kernels, compiled once per SIMD target (see kernels.cc).
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

// Second pass: y = Scale(x * r, gamma + offset). `load(d, i)` and
// `load_partial(d, i, n)` give the row's float32 input values, as in
// CanonicalSumOfSquares. The offset is added only when non-zero, so a -0
// gamma keeps its sign as in the reference.
template <typename T, typename W, typename O, bool kCastThenScale, class D, class Load,
          class LoadPartial>
HWY_INLINE void NormalizeRow(D d, size_t width, InvRms inv, const W* HWY_RESTRICT gamma,
                             float weight_offset, O* y, const Load& load,
                             const LoadPartial& load_partial) {
  constexpr size_t N = hn::MaxLanes(d);
  const auto vr = hn::Set(d, inv.r);
  const auto vpre = hn::Set(d, inv.prescale);
  const bool has_prescale = inv.prescale != 1.0f;
  const auto voff = hn::Set(d, weight_offset);
  const bool has_offset = weight_offset != 0.0f;
  size_t i = 0;
  for (; i + N <= width; i += N) {
    auto g = LoadF32(d, gamma + i);
    if (has_offset) g = hn::Add(g, voff);
    auto xv = load(d, i);
    if (has_prescale) xv = hn::Mul(xv, vpre);
    const auto h = hn::Mul(xv, vr);
    StoreF32As(d, ScaleByGamma<T, kCastThenScale>(d, h, g), y + i);
  }
  if (i < width) {
    const size_t n = width - i;
    auto g = LoadF32Partial(d, gamma + i, n);
    if (has_offset) g = hn::Add(g, voff);
    auto xv = load_partial(d, i, n);
    if (has_prescale) xv = hn::Mul(xv, vpre);
    const auto h = hn::Mul(xv, vr);
    StoreF32AsPartial(d, ScaleByGamma<T, kCastThenScale>(d, h, g), y + i, n);
  }
}

template <typename T, typename W, typename O, bool kCastThenScale>
void RmsNormRowsTyped(const RmsNormJob& job, int64_t row_begin, int64_t row_end) {
  const hn::ScalableTag<float> d;
  const size_t width = static_cast<size_t>(job.p.width);
  const W* gamma = static_cast<const W*>(job.gamma);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* x = static_cast<const T*>(job.x) + job.x_rows.Offset(row);
    O* y = static_cast<O*>(job.y) + job.y_rows.Offset(row);
    const auto load = [x](auto dd, size_t i) { return LoadF32(dd, x + i); };
    const auto load_partial = [x](auto dd, size_t i, size_t n) {
      return LoadF32Partial(dd, x + i, n);
    };
    const InvRms inv = RowInverseRms(d, width, job.p.eps, load, load_partial);
    NormalizeRow<T, W, O, kCastThenScale>(d, width, inv, gamma, job.p.weight_offset, y, load,
                                         load_partial);
  }
}

// Calls F<T, W, O, kCastThenScale>::Run(args...) for the runtime dtypes.
// The front end has already checked that the combination is defined.
template <template <typename, typename, typename, bool> class F, typename... Args>
HWY_INLINE void DispatchTypes(const NormParams& p, Args&&... args) {
  const auto with_o = [&](auto t_tag, auto w_tag) {
    using T = typename decltype(t_tag)::type;
    using W = typename decltype(w_tag)::type;
    const auto run = [&](auto o_tag) {
      using O = typename decltype(o_tag)::type;
      if (p.rounding == Rounding::kCastThenScale) {
        F<T, W, O, true>::Run(args...);
      } else {
        F<T, W, O, false>::Run(args...);
      }
    };
    switch (p.y_type) {
      case DType::kBF16: return run(std::type_identity<BF16>{});
      case DType::kF16: return run(std::type_identity<F16>{});
      default: return run(std::type_identity<float>{});
    }
  };
  const auto with_w = [&](auto t_tag) {
    switch (p.w_type) {
      case DType::kBF16: return with_o(t_tag, std::type_identity<BF16>{});
      case DType::kF16: return with_o(t_tag, std::type_identity<F16>{});
      default: return with_o(t_tag, std::type_identity<float>{});
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
