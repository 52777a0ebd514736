#include "ops/rms_norm/rms_norm_backward_reference.h"

#include <cmath>
#include <vector>

#include "reference/oracle.h"

namespace glmnorm::reference {

namespace {

// The spacing of T's values at v (its ulp), for the rounding-midpoint slack.
double UlpOf(DType t, double v) {
  const int mantissa = t == DType::kBF16 ? 8 : t == DType::kF16 ? 11 : 24;
  if (v == 0.0 || !std::isfinite(v)) return 0.0;
  int e = std::ilogb(v);
  if (t == DType::kF16 && e < -14) e = -14;
  return std::ldexp(1.0, e - (mantissa - 1));
}

}  // namespace

NormBackwardResult RmsNormBackward(const ConstTensorView& x, const ConstTensorView& gamma,
                                   const ConstTensorView& dy, const NormOptions& options,
                                   const ConstTensorView& dres) {
  NormBackwardResult out;
  const int64_t width = x.width();
  const int64_t rows = x.rows();
  out.rows = rows;
  out.width = width;
  out.dx.assign(rows * width, 0.0);
  out.dx_scale.assign(rows * width, 0.0);
  out.dx_slack.assign(rows * width, 0.0);
  out.dgamma.assign(width, 0.0);
  out.dgamma_scale.assign(width, 0.0);
  out.dgamma_slack.assign(width, 0.0);
  const bool cast = options.rounding == Rounding::kCastThenScale;
  const size_t xs = SizeOf(x.dtype), ds = SizeOf(dy.dtype);
  const size_t rs = dres.rank != 0 ? SizeOf(dres.dtype) : 0;
  std::vector<double> g(width), xf(width), dh(width), dh_slack(width);
  for (int64_t i = 0; i < width; ++i) {
    g[i] = Load(gamma.data, gamma.dtype, i);
    // SPEC §1: g = gamma + weight_offset is a float32 (one rounding).
    if (options.weight_offset != 0.0f) g[i] = RoundTo(DType::kF32, g[i] + options.weight_offset);
  }
  for (int64_t row = 0; row < rows; ++row) {
    const auto* xr = static_cast<const char*>(x.data) + RowOffset(x, row) * xs;
    const auto* dr = static_cast<const char*>(dy.data) + RowOffset(dy, row) * ds;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) {
      const double v = Load(xr, x.dtype, i);
      sum += v * v;
    }
    const double r = 1.0 / std::sqrt(sum / double(width) + double(options.eps));
    double s = 0.0, s_abs = 0.0;
    for (int64_t i = 0; i < width; ++i) {
      const double dyv = Load(dr, dy.dtype, i);
      xf[i] = Load(xr, x.dtype, i) * r;
      // Cast-then-scale: torch rounds dy * g to dy's dtype (the product's)
      // and then to x's (the gradient of h_cast): with a float32 weight and
      // 16-bit x, dy is float32 and the second rounding is the 16-bit one.
      const auto round_dh = [&](double v) { return RoundTo(x.dtype, RoundTo(dy.dtype, v)); };
      dh[i] = cast ? round_dh(dyv * g[i]) : dyv * g[i];
      dh_slack[i] = 0.0;
      if (cast && x.dtype != DType::kF32 &&
          round_dh(dyv * g[i] * (1.0 - 0x1p-20)) != round_dh(dyv * g[i] * (1.0 + 0x1p-20))) {
        dh_slack[i] = UlpOf(x.dtype, dh[i]);
      }
      s += dh[i] * xf[i];
      s_abs += std::fabs(dh[i] * xf[i]);
      double term;
      if (cast) {
        term = RoundTo(dy.dtype, dyv * RoundTo(x.dtype, xf[i]));
        if (x.dtype != DType::kF32 &&
            RoundTo(x.dtype, xf[i] * (1.0 - 0x1p-20)) != RoundTo(x.dtype, xf[i] * (1.0 + 0x1p-20))) {
          // T(xf) may round either way; the product dy * T(xf) is then rounded
          // to dy's dtype, which can move it by one more of its own ulps (one
          // subnormal f16 step, 2^-24, dwarfs |dy| * ulp(xf) for a tiny dy).
          out.dgamma_slack[i] += std::fabs(dyv) * UlpOf(x.dtype, xf[i]) * 2.0 +
                                 (dy.dtype == DType::kF32 ? 0.0 : UlpOf(dy.dtype, term));
        }
      } else {
        term = dyv * xf[i];
      }
      out.dgamma[i] += term;
      out.dgamma_scale[i] += std::fabs(term);
    }
    const double c = s / double(width);
    const double c_scale = std::fabs(c) + s_abs / double(width);
    // A dh rounded the other way (dh_slack) also moves c, hence every dx of the row.
    double c_slack = 0.0;
    for (int64_t i = 0; i < width; ++i) c_slack += dh_slack[i] * std::fabs(xf[i]);
    c_slack /= double(width);
    const auto* rr = dres.rank != 0 ? static_cast<const char*>(dres.data) + RowOffset(dres, row) * rs
                                    : nullptr;
    for (int64_t i = 0; i < width; ++i) {
      double v = r * (dh[i] - xf[i] * c);
      double scale = std::fabs(r * dh[i]) + std::fabs(r * xf[i]) * c_scale;
      double slack = 0.0;
      if (rr != nullptr) {
        const double a = Load(rr, dres.dtype, i);
        if (cast) {
          // torch's order: the norm's dx rounded to h's dtype, then the add.
          // Within float32's error of a midpoint, either rounding is allowed.
          const double window = 16.0 * std::ldexp(scale, -24);
          if (RoundTo(dres.dtype, v - window) != RoundTo(dres.dtype, v + window)) {
            slack = UlpOf(dres.dtype, v);
          }
          v = RoundTo(dres.dtype, v);
        }
        v += a;
        scale += std::fabs(a);
      }
      out.dx[row * width + i] = v;
      out.dx_scale[row * width + i] = scale;
      out.dx_slack[row * width + i] =
          std::fabs(r) * (dh_slack[i] + std::fabs(xf[i]) * c_slack) + slack;
    }
  }
  return out;
}

void ForwardRowF64(const double* x, const double* g, int64_t n, double eps, double* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const double r = 1.0 / std::sqrt(sum / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] * (x[i] * r);
}

void BackwardRowF64(const double* x, const double* g, const double* dy, int64_t n, double eps,
                    double* dx, double* dgamma_terms) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const double r = 1.0 / std::sqrt(sum / double(n) + eps);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += dy[i] * g[i] * x[i] * r;
  const double c = s / double(n);
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = r * (dy[i] * g[i] - x[i] * r * c);
    dgamma_terms[i] = dy[i] * x[i] * r;
  }
}

}  // namespace glmnorm::reference
