// Bench cases of the backward kernels on GLM-4.5's hidden size, in the
// reference mode (cast-then-scale), dgamma in gamma's dtype, the workspace
// the caller's, and the per-row rstd the forward saved (as a training step
// calls it: RmsNormWithRstd / AddRmsNormWithRstd, then the backward).
// model_bytes: rms_norm_backward_cases.h, plus the rstd read.
#include "bench_backward.h"

#include <algorithm>
#include <cmath>

#include "glmnorm/add_rms_norm_backward.h"
#include "glmnorm/qk_norm_backward.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/rms_norm_backward.h"
#include "hwy/aligned_allocator.h"
#include "ops/rms_norm/rms_norm_backward_cases.h"
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

// GLM-4.5's attention heads: 96 q, 8 k, 8 v of 128, RoPE over the first 64.
constexpr QkHeads kGlmHeads{96, 8, 8, 128};
constexpr int64_t kRotaryDim = 64;

// qk_norm_rope_backward: the gradient of QkNorm with partial RoPE over a
// fused [tokens, 112 * 128] QKV buffer (tables [tokens, 32] f32, token t at
// position t). Error column: dx of the q heads of the first rows against the
// float64 oracle (reference::RmsNormBackward) fed the un-rotated gradient,
// rotated back here in float64 from the definition (docs/BACKWARD.md).
void AddQkRopeBackwardCases(const std::vector<int64_t>& tokens_list,
                            const std::vector<std::string>& dtypes, int threads,
                            std::vector<BenchCase>& cases,
                            std::vector<std::shared_ptr<void>>& keep) {
  const QkHeads h = kGlmHeads;
  const int64_t hd = h.head_dim, half = kRotaryDim / 2;
  const int64_t width = (int64_t{h.num_q_heads} + h.num_k_heads + h.num_v_heads) * hd;
  for (int64_t tokens : tokens_list) {
    for (const std::string& dt : dtypes) {
      const DType t = ParseBenchDType(dt);
      auto qkv = std::make_shared<BenchTensor>(t, tokens * width, 1.0, 0.0, 31);
      auto dout = std::make_shared<BenchTensor>(t, tokens * width, 1.0, 0.0, 32);
      auto din = std::make_shared<BenchTensor>(t, tokens * width, 0.0, 0.0, 33);
      auto qg = std::make_shared<BenchTensor>(t, hd, 0.2, 1.0, 34);
      auto kg = std::make_shared<BenchTensor>(t, hd, 0.2, 1.0, 35);
      auto dqg = std::make_shared<BenchTensor>(t, hd, 0.0, 0.0, 36);
      auto dkg = std::make_shared<BenchTensor>(t, hd, 0.0, 0.0, 37);
      auto cos = std::make_shared<BenchTensor>(DType::kF32, tokens * half, 0.0, 0.0, 38);
      auto sin = std::make_shared<BenchTensor>(DType::kF32, tokens * half, 0.0, 0.0, 39);
      const int64_t checked = std::min(tokens, kCheckedRows);
      auto unrotated = std::make_shared<BenchTensor>(t, checked * h.num_q_heads * hd, 0.0, 0.0, 40);
      keep.insert(keep.end(), {qkv, dout, din, qg, kg, dqg, dkg, cos, sin, unrotated});
      auto* c = static_cast<float*>(cos->data());
      auto* s = static_cast<float*>(sin->data());
      for (int64_t p = 0; p < tokens; ++p) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / kRotaryDim);
          c[p * half + i] = float(std::cos(angle));
          s[p * half + i] = float(std::sin(angle));
        }
      }
      // The oracle's dy of the q heads: dlo*cos + dhi*sin, dhi*cos - dlo*sin.
      for (int64_t p = 0; p < checked; ++p) {
        for (int64_t head = 0; head < h.num_q_heads; ++head) {
          const int64_t src = p * width + head * hd, dst = (p * h.num_q_heads + head) * hd;
          for (int64_t i = 0; i < hd; ++i) {
            double v = reference::Load(dout->data(), t, src + i);
            if (i < kRotaryDim) {
              const int64_t j = i % half;
              const double lo = reference::Load(dout->data(), t, src + j);
              const double hi = reference::Load(dout->data(), t, src + half + j);
              v = i < half ? lo * c[p * half + j] + hi * s[p * half + j]
                           : hi * c[p * half + j] - lo * s[p * half + j];
            }
            reference::Store(unrotated->data(), t, dst + i, v);
          }
        }
      }
      const auto qkvv = Rows<const void*>(qkv->data(), t, tokens, width, width);
      const auto doutv = Rows<const void*>(dout->data(), t, tokens, width, width);
      const auto dinv = Rows<void*>(din->data(), t, tokens, width, width);
      const auto qgv = Contiguous<const void*>(qg->data(), t, {hd});
      const auto kgv = Contiguous<const void*>(kg->data(), t, {hd});
      const auto dqgv = Contiguous<void*>(dqg->data(), t, {hd});
      const auto dkgv = Contiguous<void*>(dkg->data(), t, {hd});
      Rope rope;
      rope.rotary_dim = int(kRotaryDim);
      rope.cos = Contiguous<const void*>(cos->data(), DType::kF32, {tokens, half});
      rope.sin = Contiguous<const void*>(sin->data(), DType::kF32, {tokens, half});
      // [tokens, 96, 128] views of the q heads: qkv's and dqkv_in's, and the oracle's dy.
      auto q_heads = [&](auto* data, int64_t rows, int64_t row_stride) {
        using Ptr = decltype(data);
        BasicTensorView<Ptr> v;
        v.data = data;
        v.dtype = t;
        v.rank = 3;
        v.shape[0] = rows, v.shape[1] = h.num_q_heads, v.shape[2] = hd;
        v.stride[0] = row_stride, v.stride[1] = hd, v.stride[2] = 1;
        return v;
      };
      const auto xq = q_heads(static_cast<const void*>(qkv->data()), tokens, width);
      const auto dxq = q_heads(static_cast<const void*>(din->data()), tokens, width);
      const auto dyq = q_heads(static_cast<const void*>(unrotated->data()), checked,
                               int64_t{h.num_q_heads} * hd);
      BenchCase bc;
      bc.kernel = "qk_norm_rope_backward";
      bc.shape = std::to_string(tokens) + "x" + std::to_string(width);
      bc.dtype = dt;
      bc.threads = threads;
      bc.rows = tokens * (h.num_q_heads + h.num_k_heads);
      bc.width = hd;
      // qkv's and dqkv_out's q and k columns read, dqkv_in's written.
      bc.model_bytes = 3 * tokens * int64_t{h.num_q_heads + h.num_k_heads} * hd * int64_t(SizeOf(t));
      const int64_t qk_bytes = bc.model_bytes / 3;
      bc.streams.Read(qk_bytes).Read(qk_bytes).Write(qk_bytes);
      bc.run = [=] {
        QkNormBackward(qkvv, doutv, dinv, h, qgv, kgv, dqgv, dkgv, NormOptions{}, rope);
      };
      bc.max_ulp = [=] { return MaxScaledUlp(xq, qgv, dyq, {}, dxq); };
      cases.push_back(std::move(bc));
    }
  }
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
        const int64_t bytes = tokens * kHidden * int64_t(SizeOf(t));
        c.streams.Read(bytes).Read(bytes).Write(bytes);  // x, dy -> dx
        if (add) c.streams.Read(bytes);                   // d_residual_out
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
  if (kernel.empty() || kernel == "qk_norm_rope_backward") {
    AddQkRopeBackwardCases(tokens_list, dtypes, threads, cases, keep);
  }
}

}  // namespace glmnorm::tools
