// Bench cases of the decoder-path kernels on GLM-4.5 shapes (hidden 5120;
// 96 + 8 + 8 heads of 128). model_bytes counts what the kernel must read and
// write, so the same-run copy moves exactly as many bytes.
#include "bench_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include <random>

#include "glmnorm/add_rms_norm.h"
#include "glmnorm/error.h"
#include "glmnorm/qk_norm.h"
#include "glmnorm/quant.h"
#include "glmnorm/rms_norm.h"
#include "hwy/aligned_allocator.h"
#include "backend/cpu/cpu_backend.h"
#include "core/work_cost.h"
#include "ops/add_rms_norm/add_rms_norm_cases.h"
#include "ops/qk_norm/qk_norm_cases.h"
#include "ops/quant/quant_cases.h"
#include "reference/reference.h"

namespace glmnorm::tools {

namespace {

constexpr int64_t kHidden = cases::kHidden.width;
constexpr QkHeads kGlmHeads = cases::kGlm45Heads;


// The unfused baseline's add: residual = R(residual + delta), a plain loop
// over rows split over the same pool.
void SeparateAdd(const TensorView& r, const ConstTensorView& d) {
  const int64_t rows = r.rows(), width = r.width();
  const JobSize size{.rows = rows,
                     .work_ns = work_cost::Ns(rows * width * 3 * int64_t(SizeOf(r.dtype)),
                                              kStreamNsPerByte)};
  cpu::RunRows({}, size, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t off = row * width;
      if (r.dtype == DType::kBF16) {
        auto* rp = static_cast<uint16_t*>(r.data) + off;
        const auto* dp = static_cast<const uint16_t*>(d.data) + off;
        for (int64_t i = 0; i < width; ++i) {
          rp[i] = BF16FromF32(F32FromBF16(rp[i]) + F32FromBF16(dp[i]));
        }
      } else if (r.dtype == DType::kF32) {
        auto* rp = static_cast<float*>(r.data) + off;
        const auto* dp = static_cast<const float*>(d.data) + off;
        for (int64_t i = 0; i < width; ++i) rp[i] += dp[i];
      } else {
        auto* rp = static_cast<uint16_t*>(r.data) + off;
        const auto* dp = static_cast<const uint16_t*>(d.data) + off;
        for (int64_t i = 0; i < width; ++i) {
          rp[i] = F16FromF32(F32FromF16(rp[i]) + F32FromF16(dp[i]));
        }
      }
    }
  });
}

bool Wanted(const std::string& filter, const char* kernel) {
  return filter.empty() || filter == kernel;
}

constexpr int64_t kCheckRows = 64;   // rows of a hidden-state case checked
constexpr int64_t kCheckTokens = 8;  // tokens of a QK case checked (x 104 heads)

// The error column of a quantised case, in e4m3 / int8 codes: the first rows
// of x (as the last timed call saw it) go through the float64 oracle, are
// stored in the value dtype the kernel quantises (quant.h), get the reference
// dynamic scale and the reference quantiser; the result is the largest
// distance between the kernel's code and that one (codes ordered by value).
int64_t QuantMaxUlp(const ConstTensorView& x, const ConstTensorView& gamma, DType value_type,
                    const ConstTensorView& q) {
  const int64_t rows = std::min(x.rows(), kCheckRows), width = x.width();
  std::vector<float> y(static_cast<size_t>(width));
  std::vector<uint8_t> stored(static_cast<size_t>(width) * SizeOf(value_type));
  int64_t worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto xr = Contiguous<const void*>(
        static_cast<const char*>(x.data) + reference::RowOffset(x, r) * SizeOf(x.dtype), x.dtype,
        {1, width});
    reference::RmsNorm(xr, gamma, Contiguous<void*>(stored.data(), value_type, {1, width}), {});
    for (int64_t i = 0; i < width; ++i) {
      y[i] = static_cast<float>(reference::Load(stored.data(), value_type, i));
    }
    const float s = reference::DynamicScale(y.data(), width, q.dtype);
    const auto* got = static_cast<const uint8_t*>(q.data) + reference::RowOffset(q, r);
    for (int64_t i = 0; i < width; ++i) {
      // Sign-magnitude codes (e4m3) and two's complement (int8) as ordinals.
      int64_t want_ord, got_ord;
      if (q.dtype == DType::kI8) {
        want_ord = reference::QuantizeI8(y[i], s);
        got_ord = static_cast<int8_t>(got[i]);
      } else {
        const uint8_t w = reference::QuantizeE4M3(y[i], s);
        if ((w & 0x7F) == 0x7F || (got[i] & 0x7F) == 0x7F) {  // NaN codes
          if ((w & 0x7F) != (got[i] & 0x7F)) return reference::kNaNUlpDistance;
          continue;
        }
        want_ord = (w & 0x80) ? -(w & 0x7F) : (w & 0x7F);
        got_ord = (got[i] & 0x80) ? -(got[i] & 0x7F) : (got[i] & 0x7F);
      }
      worst = std::max(worst, std::abs(want_ord - got_ord));
    }
  }
  return worst;
}

// One ulp of dtype t at magnitude m (normal range; the subnormal spacing below).
double UlpAt(DType t, double m) {
  const int mant = t == DType::kF32 ? 23 : t == DType::kBF16 ? 7 : 10;
  const int min_exp = t == DType::kF16 ? -14 : -126;
  int e = 0;
  std::frexp(m, &e);  // m = f * 2^e, f in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mant);
}

// The error column of a QK case: the first tokens of the buffer (as the last
// timed call left it) are normalised out of place by the kernel and by the
// float64 oracle (qk_norm_reference.h). Without RoPE: the largest ulp
// distance. With RoPE the oracle rotates its own stored norm outputs, and
// a*cos - b*sin may cancel, so the unit is the ulp of the pair's magnitude
// |a| + |b| (the tests' tolerance, qk_norm_test.cc).
int64_t QkMaxUlp(const TensorView& qkv, const QkHeads& h, const ConstTensorView& q_gamma,
                 const ConstTensorView& k_gamma, const Rope& rope) {
  const DType t = qkv.dtype;
  const int64_t tokens = std::min(qkv.rows(), kCheckTokens), width = qkv.width();
  const size_t bytes = static_cast<size_t>(tokens * width) * SizeOf(t);
  std::vector<uint8_t> in(bytes), got(bytes), want(bytes), normed(bytes);
  std::memcpy(in.data(), qkv.data, bytes);  // rows are contiguous in the bench
  Rope r = rope;
  if (r.rotary_dim > 0) {
    r.positions = Contiguous<const void*>(rope.positions.data, DType::kI64, {tokens});
  }
  const auto in_v = Rows<const void*>(in.data(), t, tokens, width, width);
  QkNorm(in_v, Rows<void*>(got.data(), t, tokens, width, width), h, q_gamma, k_gamma, {}, r);
  reference::QkNorm(in_v, Rows<void*>(want.data(), t, tokens, width, width), h, q_gamma, k_gamma,
                    {}, r);
  if (r.rotary_dim > 0) {
    reference::QkNorm(in_v, Rows<void*>(normed.data(), t, tokens, width, width), h, q_gamma,
                      k_gamma, {}, Rope{});
  }
  const int64_t half = r.rotary_dim / 2;
  int64_t worst = 0;
  for (int64_t tok = 0; tok < tokens; ++tok) {
    for (int64_t head = 0; head < h.num_q_heads + h.num_k_heads; ++head) {
      const int64_t base = tok * width + head * h.head_dim;
      for (int64_t i = 0; i < h.head_dim; ++i) {
        const int64_t k = base + i;
        const int64_t d = reference::UlpDistance(t, got.data() + k * SizeOf(t),
                                                 want.data() + k * SizeOf(t));
        if (i >= r.rotary_dim || d == 0 || d == reference::kNaNUlpDistance) {
          worst = std::max(worst, d);
          continue;
        }
        const int64_t j = base + (i < half ? i + half : i - half);
        const double mag = std::fabs(reference::Load(normed.data(), t, k)) +
                           std::fabs(reference::Load(normed.data(), t, j));
        const double err = std::fabs(reference::Load(got.data(), t, k) -
                                     reference::Load(want.data(), t, k));
        worst = std::max(worst, static_cast<int64_t>(std::ceil(err / UlpAt(t, mag))));
      }
    }
  }
  return worst;
}

}  // namespace

void AddDecoderCases(const std::string& kernel, const std::vector<int64_t>& tokens_list,
                     const std::vector<std::string>& dtypes, int threads,
                     std::vector<BenchCase>& cases, std::vector<std::shared_ptr<void>>& keep) {
  for (int64_t tokens : tokens_list) {
    for (const std::string& dt : dtypes) {
      const DType t = ParseBenchDType(dt);
      const std::string hidden_shape = std::to_string(tokens) + "x" + std::to_string(kHidden);
      const auto base = [&](const char* name, const std::string& shape, int64_t rows,
                            int64_t width) {
        BenchCase c;
        c.kernel = name;
        c.shape = shape;
        c.dtype = dt;
        c.threads = threads;
        c.rows = rows;
        c.width = width;
        return c;
      };

      // ---- add_rms_norm (y into delta, in place, as engines call it) and the
      // unfused baseline (separate add, then RmsNorm).
      for (const char* name : {"add_rms_norm", "add_then_rms_norm", "add_rms_norm_quant"}) {
        if (!Wanted(kernel, name)) continue;
        const std::string k = name;
        // Every call adds to the residual in place: with y written over delta
        // it grows by about rms(gamma) per call (add_rms_norm), with delta
        // kept (the others) by about rms(delta). A case makes up to ~10^6
        // calls at decode. With gamma and delta ~ 1 the f16 residual passed
        // 65504, then held inf and NaN, and the case timed the NaN rows' path
        // (f16 add_rms_norm 1x5120 on a Zen 4: 30.4 us; 1.55 us with these
        // scales). These scales keep f16 residuals finite over 10^6 calls
        // (the kernels' speed does not depend on the values while they are
        // normal).
        const bool y_over_delta = k == "add_rms_norm";
        auto res = std::make_shared<BenchTensor>(t, tokens * kHidden, 1.0, 0.0, 11);
        auto del =
            std::make_shared<BenchTensor>(t, tokens * kHidden, y_over_delta ? 1.0 : 1e-3, 0.0, 12);
        auto g = std::make_shared<BenchTensor>(t, kHidden, y_over_delta ? 5e-3 : 0.2,
                                               y_over_delta ? 0.0 : 1.0, 13);
        auto y = std::make_shared<BenchTensor>(t, tokens * kHidden, 0.0, 0.0, 14);
        auto q = std::make_shared<BenchTensor>(DType::kI8, tokens * kHidden, 0.0, 0.0, 15);
        auto scales = std::make_shared<std::vector<float>>(tokens);
        keep.insert(keep.end(), {res, del, g, y, q, scales});
        const auto rv = Contiguous<void*>(res->data(), t, {tokens, kHidden});
        const auto dv = Contiguous<void*>(del->data(), t, {tokens, kHidden});
        const auto gv = Contiguous<const void*>(g->data(), t, {kHidden});
        const auto yv = Contiguous<void*>(y->data(), t, {tokens, kHidden});
        BenchCase c = base(name, hidden_shape, tokens, kHidden);
        const int64_t elems = tokens * kHidden, bytes = elems * int64_t(SizeOf(t));
        if (k == "add_rms_norm" || k == "add_then_rms_norm") {
          // residual and delta read; residual and y (over delta) written.
          c.streams.Read(bytes).Read(bytes).Write(bytes, 0).Write(bytes, 1);
        } else {
          c.streams.Read(bytes).Read(bytes).Write(bytes, 0).Write(elems);  // q: 1 byte
        }
        if (k == "add_rms_norm") {
          // y = delta: reads residual and delta, writes residual and y.
          c.model_bytes = cases::AddRmsNormBytes(tokens, kHidden, t, t, t, t);
          c.run = [rv, dv, gv] { AddRmsNorm(rv, AsConst(dv), gv, dv); };
          c.max_ulp = [rv, dv, gv] {
            return reference::CompareRmsNorm(AsConst(rv), gv, AsConst(dv), {}, 0, 64).max_ulp;
          };
        } else if (k == "add_then_rms_norm") {
          // Same model bytes as the fused kernel: GB/s compare as speed.
          c.model_bytes = cases::AddRmsNormBytes(tokens, kHidden, t, t, t, t);
          c.run = [rv, dv, gv, yv] {
            SeparateAdd(rv, AsConst(dv));
            RmsNorm(AsConst(rv), gv, yv);
          };
          c.max_ulp = [rv, gv, yv] {
            return reference::CompareRmsNorm(AsConst(rv), gv, AsConst(yv), {}, 0, 64).max_ulp;
          };
        } else {
          // e4m3, dynamic per-token scale: reads residual, delta; writes
          // residual, q (1 byte) and the scales.
          const auto qv = Contiguous<void*>(q->data(), DType::kF8E4M3, {tokens, kHidden});
          c.model_bytes = cases::AddRmsNormQuantBytes(tokens, kHidden, t, t, t);
          QuantOptions qo;
          qo.scales = Contiguous<void*>(scales->data(), DType::kF32, {tokens});
          c.run = [rv, dv, gv, qv, qo] { AddRmsNormQuant(rv, AsConst(dv), gv, qv, qo); };
          // The residual holds h, the sum the last call normalised.
          c.max_ulp = [rv, gv, qv, t] {
            return QuantMaxUlp(AsConst(rv), gv, t, AsConst(qv));
          };
        }
        cases.push_back(std::move(c));
      }

      // ---- rms_norm_quant: x -> e4m3 with a dynamic per-token scale.
      if (Wanted(kernel, "rms_norm_quant")) {
        auto x = std::make_shared<BenchTensor>(t, tokens * kHidden, 1.0, 0.0, 21);
        auto g = std::make_shared<BenchTensor>(t, kHidden, 0.2, 1.0, 22);
        auto q = std::make_shared<BenchTensor>(DType::kI8, tokens * kHidden, 0.0, 0.0, 23);
        auto scales = std::make_shared<std::vector<float>>(tokens);
        keep.insert(keep.end(), {x, g, q, scales});
        const auto xv = Contiguous<const void*>(x->data(), t, {tokens, kHidden});
        const auto gv = Contiguous<const void*>(g->data(), t, {kHidden});
        const auto qv = Contiguous<void*>(q->data(), DType::kF8E4M3, {tokens, kHidden});
        QuantOptions qo;
        qo.scales = Contiguous<void*>(scales->data(), DType::kF32, {tokens});
        BenchCase c = base("rms_norm_quant", hidden_shape, tokens, kHidden);
        c.model_bytes = cases::RmsNormQuantBytes(tokens, kHidden, t, t);
        c.streams.Read(tokens * kHidden * int64_t(SizeOf(t))).Write(tokens * kHidden);
        c.run = [xv, gv, qv, qo] { RmsNormQuant(xv, gv, qv, qo); };
        c.max_ulp = [xv, gv, qv, t] { return QuantMaxUlp(xv, gv, t, AsConst(qv)); };
        cases.push_back(std::move(c));
      }

      // ---- qk_norm / qk_norm_rope, in place in the fused QKV buffer.
      for (const char* name : {"qk_norm", "qk_norm_rope"}) {
        if (!Wanted(kernel, name)) continue;
        const bool rope = std::string(name) == "qk_norm_rope";
        const QkHeads h = kGlmHeads;
        const int64_t width = int64_t{h.num_q_heads + h.num_k_heads + h.num_v_heads} * h.head_dim;
        const int64_t qk_heads = h.num_q_heads + h.num_k_heads;
        auto qkv = std::make_shared<BenchTensor>(t, tokens * width, 1.0, 0.0, 31);
        // The call runs in place thousands of times: gammas of exactly 1 and
        // true rotations keep the data from drifting into subnormals or inf
        // (which would time the slow paths). The work done is the same.
        auto qg = std::make_shared<BenchTensor>(t, h.head_dim, 0.0, 1.0, 32);
        auto kg = std::make_shared<BenchTensor>(t, h.head_dim, 0.0, 1.0, 33);
        const int64_t rot = cases::kGlm45RotaryDim, half = rot / 2, positions = 4096;
        auto cs = std::make_shared<BenchTensor>(DType::kF32, positions * half, 0.0, 0.0, 34);
        auto sn = std::make_shared<BenchTensor>(DType::kF32, positions * half, 0.0, 0.0, 35);
        for (int64_t p = 0; p < positions; ++p) {
          for (int64_t i = 0; i < half; ++i) {
            const double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / double(rot));
            static_cast<float*>(cs->data())[p * half + i] = float(std::cos(angle));
            static_cast<float*>(sn->data())[p * half + i] = float(std::sin(angle));
          }
        }
        auto pos = std::make_shared<std::vector<int64_t>>(tokens);
        for (int64_t i = 0; i < tokens; ++i) (*pos)[i] = (i * 7919) % positions;
        keep.insert(keep.end(), {qkv, qg, kg, cs, sn, pos});
        const auto view = Rows(qkv->data(), t, tokens, width, width);
        const auto qgv = Contiguous<const void*>(qg->data(), t, {h.head_dim});
        const auto kgv = Contiguous<const void*>(kg->data(), t, {h.head_dim});
        Rope r;
        if (rope) {
          r.rotary_dim = static_cast<int>(rot);
          r.cos = Contiguous<const void*>(cs->data(), DType::kF32, {positions, half});
          r.sin = Contiguous<const void*>(sn->data(), DType::kF32, {positions, half});
          r.positions = Contiguous<const void*>(pos->data(), DType::kI64, {tokens});
        }
        BenchCase c = base(name,
                           std::to_string(tokens) + "x" + std::to_string(qk_heads) + "x" +
                               std::to_string(h.head_dim),
                           tokens * qk_heads, h.head_dim);
        // Reads and writes the q and k heads (v untouched); the tables are
        // small and stay in cache.
        c.model_bytes = cases::QkNormBytes(tokens, h, t, t, t);
        const int64_t qk_bytes = tokens * qk_heads * h.head_dim * int64_t(SizeOf(t));
        c.streams.Read(qk_bytes).Write(qk_bytes, 0);  // in place
        c.run = [view, h, qgv, kgv, r] { QkNorm(AsConst(view), view, h, qgv, kgv, {}, r); };
        c.max_ulp = [view, h, qgv, kgv, r] { return QkMaxUlp(view, h, qgv, kgv, r); };
        cases.push_back(std::move(c));
      }
    }
  }
}

}  // namespace glmnorm::tools
