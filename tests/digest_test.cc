// Output digests: a 64-bit FNV-1a hash of every op's output bytes over a
// fixed set of cases (fixed inputs, no random seed), on every compiled SIMD
// target, compared with tests/data/digests.txt. A restructuring or a faster
// kernel must not change one output bit: this test says which case moved.
//
// Regenerate (only when an output is MEANT to change, and say why in the
// commit): GLMNORM_WRITE_DIGESTS=1 build/release/tests/core_test
//   --gtest_filter='Digests.*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "glmnorm/quant.h"
#include "ops/cases.h"
#include "support/test_support.h"

#ifndef GLMNORM_TEST_DATA
#error "GLMNORM_TEST_DATA must point at tests/data"
#endif

namespace glmnorm {
namespace {

using test::Buffer;

uint64_t Fnv1a(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
  return h;
}
constexpr uint64_t kFnvBasis = 0xCBF29CE484222325ull;

// Inputs from a fully specified generator (mt19937_64, no std::
// distributions, whose algorithms differ between standard libraries):
// uniform in [-2, 2) times 2^e with e in [-4, 4], and a few special rows.
void FillFixed(Buffer& b, uint64_t seed, double offset = 0.0) {
  std::mt19937_64 gen(seed);
  for (size_t i = 0; i < b.size; ++i) {
    const uint64_t r = gen();
    const double u = static_cast<double>(r >> 11) * 0x1p-53 * 4.0 - 2.0;
    const int e = static_cast<int>((r & 7) + (r >> 3 & 1)) - 4;
    b.Set(i, offset + std::ldexp(u, e));
  }
}

struct Combo {
  DType t, w;
  Rounding rounding;
};

// The combinations every norm op accepts (src/ops/cases.h), rounding mode
// first: the inputs of a case come from a running seed, so this order is
// part of the recorded digests.
std::vector<Combo> Combos() {
  std::vector<Combo> c;
  for (Rounding r : {Rounding::kCastThenScale, Rounding::kSingle}) {
    for (const cases::NormDTypes& d : cases::CommonNormDTypes(/*single_to_f32=*/false)) {
      if (d.rounding == r) c.push_back({d.x, d.w, d.rounding});
    }
  }
  return c;
}

DType OutType(const Combo& c) {
  return c.rounding == Rounding::kCastThenScale ? Promote(c.w, c.t) : c.t;
}

std::string Key(const std::string& op, const Combo& c, int64_t rows, int64_t width,
                const std::string& extra) {
  return op + " x=" + std::string(Name(c.t)) + " w=" + std::string(Name(c.w)) +
         (c.rounding == Rounding::kCastThenScale ? " cast" : " single") + " " +
         std::to_string(rows) + "x" + std::to_string(width) + extra;
}

// Every case's digest on the current target, keyed by a readable name.
std::map<std::string, uint64_t> ComputeDigests() {
  std::map<std::string, uint64_t> d;
  const int64_t rows = 5;
  uint64_t seed = 1;
  for (const Combo& c : Combos()) {
    for (int64_t width : {1, 37, 128, 1000, 5120}) {
      const int64_t n = rows * width;
      Buffer x(c.t, n), delta(c.t, n), g(c.w, width);
      FillFixed(x, ++seed);
      FillFixed(delta, ++seed);
      FillFixed(g, ++seed, 1.0);
      if (width > 1) x.Set(width + 1, 1e30), x.Set(3 * width, 1e-30);  // huge and tiny rows
      const auto xv = Contiguous<const void*>(x.data(), c.t, {rows, width});
      const auto dv = Contiguous<const void*>(delta.data(), c.t, {rows, width});
      const auto gv = Contiguous<const void*>(g.data(), c.w, {width});
      for (float offset : {0.0f, 1.0f}) {
        NormOptions opt;
        opt.rounding = c.rounding;
        opt.weight_offset = offset;
        const std::string extra = offset != 0.0f ? " offset=1" : "";
        Buffer y(OutType(c), n);
        RmsNorm(xv, gv, Contiguous<void*>(y.data(), y.dtype, {rows, width}), opt);
        d[Key("rms_norm", c, rows, width, extra)] =
            Fnv1a(kFnvBasis, y.data(), n * SizeOf(y.dtype));
      }
      for (bool rounded_sum : {true, false}) {
        AddNormOptions opt;
        opt.rounding = c.rounding;
        opt.normalize_rounded_sum = rounded_sum;
        Buffer res = x, y(OutType(c), n);
        AddRmsNorm(Contiguous<void*>(res.data(), c.t, {rows, width}), dv, gv,
                   Contiguous<void*>(y.data(), y.dtype, {rows, width}), opt);
        uint64_t h = Fnv1a(kFnvBasis, res.data(), n * SizeOf(c.t));
        d[Key("add_rms_norm", c, rows, width, rounded_sum ? "" : " f32-sum")] =
            Fnv1a(h, y.data(), n * SizeOf(y.dtype));
      }
      for (DType qt : {DType::kI8, DType::kF8E4M3}) {
        for (bool dynamic : {true, false}) {
          NormOptions opt;
          opt.rounding = c.rounding;
          QuantOptions qo;
          qo.scaling = dynamic ? QuantScaling::kDynamicPerToken : QuantScaling::kStatic;
          qo.scale = 0.037f;
          std::vector<float> scales(rows, -1.0f);
          qo.scales = Contiguous<void*>(scales.data(), DType::kF32, {rows});
          std::vector<uint8_t> q(n);
          RmsNormQuant(xv, gv, Contiguous<void*>(q.data(), qt, {rows, width}), qo, opt);
          const std::string extra =
              std::string(" q=") + std::string(Name(qt)) + (dynamic ? " dynamic" : " static");
          d[Key("rms_norm_quant", c, rows, width, extra)] =
              Fnv1a(Fnv1a(kFnvBasis, q.data(), n), scales.data(), rows * 4);
          Buffer res = x;
          AddNormOptions aopt;
          aopt.rounding = c.rounding;
          AddRmsNormQuant(Contiguous<void*>(res.data(), c.t, {rows, width}), dv, gv,
                          Contiguous<void*>(q.data(), qt, {rows, width}), qo, aopt);
          uint64_t h = Fnv1a(kFnvBasis, res.data(), n * SizeOf(c.t));
          h = Fnv1a(h, q.data(), n);
          d[Key("add_rms_norm_quant", c, rows, width, extra)] = Fnv1a(h, scales.data(), rows * 4);
        }
      }
    }
    // QK-norm in a padded fused QKV row: 4 q, 2 k, 2 v heads of 128, with
    // and without partial RoPE over 64 dims, positions out of order.
    const QkHeads h{4, 2, 2, 128};
    const int64_t tokens = 6, width = 8 * 128, stride = width + 8, half = 32;
    Buffer in(c.t, tokens * stride), qg(c.w, 128), kg(c.w, 128), cos(DType::kF32, 16 * half),
        sin(DType::kF32, 16 * half);
    FillFixed(in, ++seed);
    FillFixed(qg, ++seed, 1.0);
    FillFixed(kg, ++seed, 1.0);
    for (size_t i = 0; i < cos.size; ++i) {
      cos.Set(i, std::cos(0.1 * double(i)));
      sin.Set(i, std::sin(0.1 * double(i)));
    }
    const int64_t positions[] = {3, 0, 15, 7, 7, 1};
    for (bool rope_on : {false, true}) {
      NormOptions opt;
      opt.rounding = c.rounding;
      Rope rope;
      if (rope_on) {
        rope.rotary_dim = 2 * half;
        rope.cos = Contiguous<const void*>(cos.data(), DType::kF32, {16, half});
        rope.sin = Contiguous<const void*>(sin.data(), DType::kF32, {16, half});
        rope.positions = Contiguous<const void*>(positions, DType::kI64, {tokens});
      }
      Buffer out(OutType(c), tokens * stride);
      QkNorm(Rows<const void*>(in.data(), c.t, tokens, width, stride),
             Rows<void*>(out.data(), out.dtype, tokens, width, stride), h,
             Contiguous<const void*>(qg.data(), c.w, {128}),
             Contiguous<const void*>(kg.data(), c.w, {128}), opt, rope);
      d[Key("qk_norm", c, tokens, width, rope_on ? " rope64" : "")] =
          Fnv1a(kFnvBasis, out.data(), out.size * SizeOf(out.dtype));
    }
  }
  return d;
}

std::string DigestPath() { return std::string(GLMNORM_TEST_DATA) + "/digests.txt"; }

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

TEST(Digests, EveryOpEveryTargetMatchesTheRecordedOutputs) {
  std::map<std::string, std::string> recorded;
  {
    std::ifstream in(DigestPath());
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t tab = line.rfind('\t');
      ASSERT_NE(tab, std::string::npos) << line;
      recorded[line.substr(0, tab)] = line.substr(tab + 1);
    }
  }
  if (std::getenv("GLMNORM_WRITE_DIGESTS") != nullptr) {
    std::ofstream out(DigestPath());
    out << "# FNV-1a 64 of each op's output bytes (tests/digest_test.cc); the same on every "
           "SIMD target.\n";
    for (const auto& [key, value] : ComputeDigests()) out << key << '\t' << Hex(value) << '\n';
    GTEST_SKIP() << "wrote " << DigestPath();
  }
  ASSERT_GT(recorded.size(), 0u) << "no digests in " << DigestPath();
  int64_t moved = 0;
  size_t cases = 0;
  test::ForEachTarget([&](const char* target) {
    const auto digests = ComputeDigests();
    cases = digests.size();
    EXPECT_EQ(digests.size(), recorded.size()) << target << ": the case list changed";
    for (const auto& [key, value] : digests) {
      const auto it = recorded.find(key);
      if (it == recorded.end()) {
        ADD_FAILURE() << target << ": no recorded digest for " << key;
      } else if (it->second != Hex(value) && moved++ < 20) {
        ADD_FAILURE() << target << ": output bits changed: " << key;
      }
    }
  });
  EXPECT_EQ(moved, 0);
  std::printf("%zu cases checked on every target\n", cases);
}

}  // namespace
}  // namespace glmnorm
