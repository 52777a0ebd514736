// Bench cases of the backward kernels on GLM-4.5's hidden size, in the
// reference mode (cast-then-scale), dgamma in gamma's dtype, the workspace
// the caller's, and the per-row rstd the forward saved (as a training step
// calls it: RmsNormWithRstd / AddRmsNormWithRstd, then the backward).
// model_bytes: rms_norm_backward_cases.h, plus the rstd read.
#include "bench_backward.h"

#include <algorithm>
#include <cmath>

#include "glmnorm/add_rms_norm_backward.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/rms_norm_backward.h"
#include "hwy/aligned_allocator.h"
#include "ops/rms_norm_backward/rms_norm_backward_cases.h"
#include "reference/reference.h"

namespace glmnorm::tools {

namespace {

constexpr int64_t kHidden = cases::kHidden.width;
constexpr int64_t kCheckedRows = 64;

// The first `rows` rows of a 2-D view.
template <typename Ptr>
BasicTensorView<Ptr> FirstRows(BasicTensorView<Ptr> v, int64_t rows) {
  v.shape[0] = std::min(v.shape[0], rows);
  return v;
}

// Max error of dx over the first kCheckedRows rows against the float64
// oracle, in ulps of dx's dtype at the oracle's condition-aware scale
// (docs/BACKWARD.md: plain ulps are unbounded where dx cancels to ~0).
int64_t MaxScaledUlp(const ConstTensorView& x, const ConstTensorView& g,
                     const ConstTensorView& dy, const ConstTensorView& dres,
                     const ConstTensorView& dx) {
  const ConstTensorView xs = FirstRows(x, kCheckedRows), dys = FirstRows(dy, kCheckedRows),
                        dxs = FirstRows(dx, kCheckedRows);
  const ConstTensorView dress = dres.rank ? FirstRows(dres, kCheckedRows) : dres;
  const auto ref = reference::RmsNormBackward(xs, g, dys, {}, dress);
  const int mantissa = dx.dtype == DType::kBF16 ? 8 : dx.dtype == DType::kF16 ? 11 : 24;
  double worst = 0.0;
  for (int64_t r = 0; r < ref.rows; ++r) {
    for (int64_t i = 0; i < ref.width; ++i) {
      const double got = reference::Load(
          static_cast<const char*>(dxs.data) + reference::RowOffset(dxs, r) * SizeOf(dx.dtype),
          dx.dtype, i);
      const double want = ref.dx[r * ref.width + i];
      // RNE to the output dtype: half an ulp of the value is the rounding itself.
      const double scale = std::max(ref.dx_scale[r * ref.width + i], std::fabs(want));
      if (scale == 0.0 || !std::isfinite(scale)) continue;
      const double ulp = std::ldexp(1.0, std::ilogb(scale) - (mantissa - 1));
      worst = std::max(worst, std::fabs(got - want) / ulp);
    }
  }
  return static_cast<int64_t>(std::ceil(worst - 0.5));  // beyond the final rounding
}

}  // namespace

void AddBackwardCases(const std::string& kernel, const std::vector<int64_t>& tokens_list,
                      const std::vector<std::string>& dtypes, int threads,
                      std::vector<BenchCase>& cases, std::vector<std::shared_ptr<void>>& keep) {
  for (const char* name : {"rms_norm_backward", "add_rms_norm_backward"}) {
    if (!kernel.empty() && kernel != name) continue;
    const bool add = std::string(name) == "add_rms_norm_backward";
    for (int64_t tokens : tokens_list) {
      for (const std::string& dt : dtypes) {
        const DType t = ParseBenchDType(dt);
        auto x = std::make_shared<BenchTensor>(t, tokens * kHidden, 1.0, 0.0, 21);
        auto g = std::make_shared<BenchTensor>(t, kHidden, 0.2, 1.0, 22);
        auto dy = std::make_shared<BenchTensor>(t, tokens * kHidden, 1.0, 0.0, 23);
        auto dres = std::make_shared<BenchTensor>(t, tokens * kHidden, 0.1, 0.0, 24);
        auto dx = std::make_shared<BenchTensor>(t, tokens * kHidden, 0.0, 0.0, 25);
        auto dg = std::make_shared<BenchTensor>(t, kHidden, 0.0, 0.0, 26);
        auto ws = std::make_shared<BenchTensor>(
            DType::kF32, int64_t(NormBackwardWorkspaceBytes(tokens, kHidden) / 4 + 1), 0.0, 0.0,
            27);
        auto rstd = std::make_shared<BenchTensor>(DType::kF32, tokens, 0.0, 0.0, 28);
        keep.insert(keep.end(), {x, g, dy, dres, dx, dg, ws, rstd});
        const auto xv = Contiguous<const void*>(x->data(), t, {tokens, kHidden});
        const auto gv = Contiguous<const void*>(g->data(), t, {kHidden});
        const auto dyv = Contiguous<const void*>(dy->data(), t, {tokens, kHidden});
        const auto dresv = Contiguous<const void*>(dres->data(), t, {tokens, kHidden});
        const auto dxv = Contiguous<void*>(dx->data(), t, {tokens, kHidden});
        const auto dgv = Contiguous<void*>(dg->data(), t, {kHidden});
        const Workspace w{ws->data(), NormBackwardWorkspaceBytes(tokens, kHidden)};
        // The forward's rstd of x (for add_rms_norm_backward, x plays h).
        const auto rv = Contiguous<void*>(rstd->data(), DType::kF32, {tokens});
        auto y = std::make_shared<BenchTensor>(t, tokens * kHidden, 0.0, 0.0, 29);
        keep.push_back(y);
        RmsNormWithRstd(xv, gv, Contiguous<void*>(y->data(), t, {tokens, kHidden}), rv);
        const ConstTensorView rs = AsConst(rv);
        BenchCase c;
        c.kernel = name;
        c.shape = std::to_string(tokens) + "x" + std::to_string(kHidden);
        c.dtype = dt;
        c.threads = threads;
        c.rows = tokens;
        c.width = kHidden;
        c.model_bytes = cases::RmsNormBackwardBytes(tokens, kHidden, t, t, t, t, t,
                                                    add ? int64_t(SizeOf(t)) : 0) +
                        tokens * 4;
        if (add) {
          c.run = [=] { AddRmsNormBackward(xv, gv, dyv, dresv, dxv, {}, dgv, {}, rs, w); };
          c.max_ulp = [=] { return MaxScaledUlp(xv, gv, dyv, dresv, AsConst(dxv)); };
        } else {
          c.run = [=] { RmsNormBackward(xv, gv, dyv, dxv, dgv, {}, rs, w); };
          c.max_ulp = [=] { return MaxScaledUlp(xv, gv, dyv, {}, AsConst(dxv)); };
        }
        cases.push_back(std::move(c));
      }
    }
  }
}

}  // namespace glmnorm::tools
