// QkNorm on a fused QKV buffer: bit-exact equal to RmsNorm over the q and k
// head views (so the RmsNorm oracle applies), v and padding untouched, in and
// out of place; fused RoPE bit-exact equal to norm-then-RoPE done separately
// (float32 rotation) and close to the float64 reference; every SIMD target.
#include "glmnorm/qk_norm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "ops/qk_norm/qk_norm_cases.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using test::Buffer;
using ::testing::HasSubstr;

struct QkCombo {
  DType t, w, o;
  Rounding rounding;
};

// The case table (qk_norm_cases.h).
std::vector<QkCombo> Combos() {
  std::vector<QkCombo> combos;
  for (const cases::NormDTypes& d : cases::QkNormDTypes()) {
    combos.push_back({d.x, d.w, d.y, d.rounding});
  }
  return combos;
}

const auto& kHeadSets = cases::kQkNormTestHeads;

std::string Describe(const QkCombo& c, const QkHeads& h, const char* target) {
  return std::string(target) + " in=" + std::string(Name(c.t)) + " w=" + std::string(Name(c.w)) +
         " out=" + std::string(Name(c.o)) +
         (c.rounding == Rounding::kCastThenScale ? " cast-then-scale" : " single") + " heads " +
         std::to_string(h.num_q_heads) + "+" + std::to_string(h.num_k_heads) + "+" +
         std::to_string(h.num_v_heads) + "x" + std::to_string(h.head_dim);
}

// [tokens, heads, head_dim] view of a part (q or k) of a QKV buffer.
template <typename Ptr>
BasicTensorView<Ptr> HeadsView(Ptr base, DType t, int64_t tokens, int64_t row_stride,
                               int64_t first_col, int64_t heads, int64_t head_dim) {
  BasicTensorView<Ptr> v;
  v.data = reinterpret_cast<Ptr>(reinterpret_cast<uintptr_t>(base) + first_col * SizeOf(t));
  v.dtype = t;
  v.rank = 3;
  v.shape[0] = tokens, v.shape[1] = heads, v.shape[2] = head_dim;
  v.stride[0] = row_stride, v.stride[1] = head_dim, v.stride[2] = 1;
  return v;
}

constexpr double kSentinel = 768.0;

struct QkSetup {
  QkCombo c;
  QkHeads h;
  int64_t tokens, width, stride;
  Buffer in, qg, kg;
  QkSetup(const QkCombo& combo, const QkHeads& heads, int64_t tokens_, int64_t pad)
      : c(combo),
        h(heads),
        tokens(tokens_),
        width(int64_t{heads.num_q_heads + heads.num_k_heads + heads.num_v_heads} * heads.head_dim),
        stride(width + pad),
        in(combo.t, tokens_ * (width + pad)),
        qg(combo.w, heads.head_dim),
        kg(combo.w, heads.head_dim) {
    test::FillRandom(in);
    test::FillGamma(qg);
    test::FillGamma(kg);
  }
  ConstTensorView In() const { return Rows(in.data(), c.t, tokens, width, stride); }
  ConstTensorView QG() const { return Contiguous<const void*>(qg.data(), c.w, {h.head_dim}); }
  ConstTensorView KG() const { return Contiguous<const void*>(kg.data(), c.w, {h.head_dim}); }
  int64_t QCols() const { return int64_t{h.num_q_heads} * h.head_dim; }
  int64_t KCols() const { return int64_t{h.num_k_heads} * h.head_dim; }
};

// Expected out: RmsNorm over the q heads and the k heads; sentinel elsewhere.
Buffer ExpectedByRmsNorm(const QkSetup& s, const NormOptions& opt) {
  Buffer want(s.c.o, s.tokens * s.stride);
  for (size_t i = 0; i < want.size; ++i) want.Set(i, kSentinel);
  const int64_t hd = s.h.head_dim;
  if (s.h.num_q_heads > 0) {
    RmsNorm(HeadsView(s.in.data(), s.c.t, s.tokens, s.stride, 0, s.h.num_q_heads, hd), s.QG(),
            HeadsView(want.data(), s.c.o, s.tokens, s.stride, 0, s.h.num_q_heads, hd), opt);
  }
  if (s.h.num_k_heads > 0) {
    RmsNorm(HeadsView(s.in.data(), s.c.t, s.tokens, s.stride, s.QCols(), s.h.num_k_heads, hd),
            s.KG(),
            HeadsView(want.data(), s.c.o, s.tokens, s.stride, s.QCols(), s.h.num_k_heads, hd), opt);
  }
  return want;
}

TEST(QkNorm, EqualsRmsNormOfEachHeadEveryTarget) {
  test::Seed();
  test::ForEachTarget([](const char* target) {
    for (const QkCombo& c : Combos()) {
      for (const QkHeads& h : kHeadSets) {
        NormOptions opt;
        opt.rounding = c.rounding;
        for (float offset : {0.0f, 1.0f}) {
          opt.weight_offset = offset;
          const std::string what = Describe(c, h, target) + (offset != 0.0f ? " offset=1" : "");
          QkSetup s(c, h, 3, 5);
          const Buffer want = ExpectedByRmsNorm(s, opt);
          Buffer out(c.o, s.tokens * s.stride);
          for (size_t i = 0; i < out.size; ++i) out.Set(i, kSentinel);
          const Buffer in_before = s.in;
          QkNorm(s.In(), Rows(out.data(), c.o, s.tokens, s.width, s.stride), h, s.QG(), s.KG(),
                 opt);
          EXPECT_EQ(0, std::memcmp(out.data(), want.data(), out.size * SizeOf(c.o)))
              << what << ": differs from RmsNorm per head (or wrote v / padding)";
          EXPECT_EQ(0, std::memcmp(s.in.data(), in_before.data(), s.in.size * SizeOf(c.t)))
              << what << ": input written";
          // And the RmsNorm oracle on the q heads.
          if (h.num_q_heads > 0) {
            const auto stats =
                test::CompareWithOracle(HeadsView(static_cast<const void*>(s.in.data()), c.t,
                                                  s.tokens, s.stride, 0, h.num_q_heads, h.head_dim),
                                        s.QG(),
                                        HeadsView(static_cast<const void*>(out.data()), c.o,
                                                  s.tokens, s.stride, 0, h.num_q_heads, h.head_dim),
                                        opt, test::UlpLimit(c.o));
            EXPECT_EQ(stats.over_limit, 0) << what << ": " << stats.first_failure;
          }
        }
      }
    }
  });
}

// bf16 heads reduced 16 at once whose q or k group NativeRowOk admits are
// normalised in one loop (NormalizeNativeRows, norm_row-inl.h); a batch may
// hold q and k heads (each group has its gamma), and a group with a head
// past the bound goes head by head. The same bits as RmsNorm per head, on
// every target.
constexpr QkCombo kBf16Combo{DType::kBF16, DType::kBF16, DType::kBF16, Rounding::kCastThenScale};
// 24 heads: batches of 16 q, and 4 q + 4 k; 17: 12 q + 4 k, and 1 k.
constexpr QkHeads kNativeBatchHeads[] = {{20, 4, 1, 128}, {12, 5, 0, 256}};

// 3 tokens of random bf16 heads h, with a subnormal in q head 2 of token 1
// and in k head 1 of token 2 (NativeRowOk refuses their groups, which go
// head by head), and a 2^-64 in the last q head of token 0 (still native).
QkSetup Bf16HeadsPastTheBound(const QkHeads& h) {
  QkSetup s(kBf16Combo, h, 3, 5);
  const int64_t hd = h.head_dim;
  s.in.Set(1 * s.stride + 2 * hd + 9, 0x1p-130);
  s.in.Set(2 * s.stride + s.QCols() + hd + 4, 0x1p-130);
  s.in.Set(0 * s.stride + (h.num_q_heads - 1) * hd + 1, 0x1p-64);
  return s;
}

TEST(QkNorm, NativeBf16HeadBatchesEqualRmsNormEveryTarget) {
  const uint64_t seed = test::Seed();
  const QkCombo& c = kBf16Combo;
  for (const QkHeads& h : kNativeBatchHeads) {
    for (float offset : {0.0f, 1.0f}) {
      NormOptions opt;
      opt.weight_offset = offset;
      QkSetup s = Bf16HeadsPastTheBound(h);
      const Buffer want = ExpectedByRmsNorm(s, opt);
      const std::string what = Describe(c, h, "") + " offset " + std::to_string(offset) +
                               ", seed " + std::to_string(seed);
      test::ExpectSameBitsOnEveryTarget(what, [&](const char* target) {
        Buffer out(c.o, s.tokens * s.stride);
        for (size_t i = 0; i < out.size; ++i) out.Set(i, kSentinel);
        QkNorm(s.In(), Rows(out.data(), c.o, s.tokens, s.width, s.stride), h, s.QG(), s.KG(), opt);
        EXPECT_EQ(0, std::memcmp(out.data(), want.data(), out.size * 2))
            << what << " " << target << ": differs from RmsNorm per head";
        return test::BytesOf(out.data(), out.size * 2);
      });
    }
  }
}

TEST(QkNorm, InPlaceMatchesOutOfPlaceAndKeepsV) {
  test::ForEachTarget([](const char* target) {
    for (const QkCombo& c : Combos()) {
      if (c.o != c.t) continue;
      for (const QkHeads& h : kHeadSets) {
        NormOptions opt;
        opt.rounding = c.rounding;
        QkSetup s(c, h, 4, 3);
        Buffer want = ExpectedByRmsNorm(s, opt);
        // v columns and padding keep the input.
        for (int64_t t = 0; t < s.tokens; ++t) {
          for (int64_t i = s.QCols() + s.KCols(); i < s.stride; ++i) {
            want.Set(t * s.stride + i, s.in.Get(t * s.stride + i));
          }
        }
        QkNorm(s.In(), Rows(s.in.data(), c.t, s.tokens, s.width, s.stride), h, s.QG(), s.KG(), opt);
        EXPECT_EQ(0, std::memcmp(s.in.data(), want.data(), s.in.size * SizeOf(c.t)))
            << Describe(c, h, target);
      }
    }
  });
}

// [..., W] views of rank 1, 3 and 4 whose leading dims form rows give the
// bits of the 2-D [tokens, W] call (the tokens are the product of the
// leading dims); leading dims that do not form rows are refused by name.
TEST(QkNorm, LeadingDimsAreTokens) {
  const QkCombo c = Combos().front();
  const QkHeads h{2, 1, 1, 8};
  NormOptions opt;
  opt.rounding = c.rounding;
  QkSetup s(c, h, 6, 3);  // 6 tokens, row stride width + 3
  Buffer want(c.o, s.tokens * s.stride), got(c.o, s.tokens * s.stride);
  QkNorm(s.In(), Rows(want.data(), c.o, s.tokens, s.width, s.stride), h, s.QG(), s.KG(), opt);
  auto shaped = [&](auto* data, DType dt, std::vector<int64_t> lead) {
    using Ptr = decltype(data);
    BasicTensorView<Ptr> v;
    v.data = data;
    v.dtype = dt;
    v.rank = static_cast<int>(lead.size()) + 1;
    int64_t stride = s.stride;
    v.shape[v.rank - 1] = s.width;
    v.stride[v.rank - 1] = 1;
    for (int i = v.rank - 2; i >= 0; --i) {
      v.shape[i] = lead[i];
      v.stride[i] = stride;
      stride *= lead[i];
    }
    return v;
  };
  for (const std::vector<int64_t>& lead :
       std::vector<std::vector<int64_t>>{{2, 3}, {3, 1, 2}, {1, 6}, {6}}) {
    std::fill(got.bytes.begin(), got.bytes.end(), 0);
    QkNorm(shaped(static_cast<const void*>(s.in.data()), c.t, lead),
           shaped(static_cast<void*>(got.data()), c.o, lead), h, s.QG(), s.KG(), opt);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size * SizeOf(c.o)))
        << "leading dims of rank " << lead.size();
  }
  // One token as a rank-1 view.
  Buffer one(c.o, s.width);
  QkNorm(Contiguous<const void*>(s.in.data(), c.t, {s.width}),
         Contiguous<void*>(one.data(), c.o, {s.width}), h, s.QG(), s.KG(), opt);
  EXPECT_EQ(0, std::memcmp(one.data(), want.data(), one.size * SizeOf(c.o))) << "rank 1";
  // [2, 3, W] whose outer stride is not 3 rows: refused, naming the view.
  auto bad = shaped(static_cast<void*>(got.data()), c.o, {2, 3});
  bad.stride[0] = s.stride * 2;  // 3 rows per outer step, 2 rows apart: no single row stride
  try {
    QkNorm(s.In(), bad, h, s.QG(), s.KG(), opt);
    ADD_FAILURE() << "no error for leading dims that do not form rows";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("QkNorm: qkv_out: the leading dims of shape [2, 3, 32]"));
  }
}

// ---------------------------------------------------------------- RoPE

struct RopeTables {
  int64_t positions, half;
  std::vector<float> cos, sin;
  std::vector<int64_t> pos;
  RopeTables(int64_t positions_, int64_t rotary_dim, int64_t tokens)
      : positions(positions_),
        half(rotary_dim / 2),
        cos(positions_ * half),
        sin(positions_ * half) {
    // GLM-style inverse frequencies (theta 10000) over rotary_dim.
    for (int64_t p = 0; p < positions; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const double f = std::pow(10000.0, -2.0 * double(i) / double(rotary_dim));
        cos[p * half + i] = static_cast<float>(std::cos(double(p) * f));
        sin[p * half + i] = static_cast<float>(std::sin(double(p) * f));
      }
    }
    std::uniform_int_distribution<int64_t> pick(0, positions - 1);
    for (int64_t t = 0; t < tokens; ++t) pos.push_back(pick(test::Rng()));
  }
  Rope Get(int rotary_dim, bool with_positions) const {
    Rope r;
    r.rotary_dim = rotary_dim;
    r.cos = Contiguous<const void*>(cos.data(), DType::kF32, {positions, half});
    r.sin = Contiguous<const void*>(sin.data(), DType::kF32, {positions, half});
    if (with_positions) {
      r.positions =
          Contiguous<const void*>(pos.data(), DType::kI64, {static_cast<int64_t>(pos.size())});
    }
    return r;
  }
};

// Norm then RoPE done separately: QkNorm without RoPE, then the rotation in
// float32 (Mul, Mul, Sub / Mul, Mul, Add) of the stored values, rounded once.
Buffer NormThenRope(const QkSetup& s, const NormOptions& opt, const Rope& rope) {
  Buffer out(s.c.o, s.tokens * s.stride);
  for (size_t i = 0; i < out.size; ++i) out.Set(i, kSentinel);
  QkNorm(s.In(), Rows(out.data(), s.c.o, s.tokens, s.width, s.stride), s.h, s.QG(), s.KG(), opt);
  const int64_t half = rope.rotary_dim / 2, hd = s.h.head_dim;
  const auto* cos = static_cast<const float*>(rope.cos.data);
  const auto* sin = static_cast<const float*>(rope.sin.data);
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t p =
        rope.positions.rank != 0 ? static_cast<const int64_t*>(rope.positions.data)[t] : t;
    for (int64_t head = 0; head < s.h.num_q_heads + s.h.num_k_heads; ++head) {
      const int64_t base = t * s.stride + head * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float a = static_cast<float>(out.Get(base + i));
        const float b = static_cast<float>(out.Get(base + half + i));
        const float c = cos[p * half + i], sn = sin[p * half + i];
        const float ac = a * c, bs = b * sn, bc = b * c, as = a * sn;
        out.Set(base + i, ac - bs);
        out.Set(base + half + i, bc + as);
      }
    }
  }
  return out;
}

TEST(QkNormRope, EqualsNormThenRopeEveryTarget) {
  test::ForEachTarget([](const char* target) {
    for (const QkCombo& c : Combos()) {
      for (const QkHeads& h : kHeadSets) {
        for (int rotary_dim : {h.head_dim / 2 * 2 / 2 * 2 == h.head_dim ? h.head_dim / 2 : 2,
                               h.head_dim - h.head_dim % 2, 2}) {
          if (rotary_dim % 2 != 0 || rotary_dim < 2) continue;
          NormOptions opt;
          opt.rounding = c.rounding;
          QkSetup s(c, h, 3, 2);
          RopeTables tables(50, rotary_dim, s.tokens);
          for (bool with_positions : {false, true}) {
            const Rope rope = tables.Get(rotary_dim, with_positions);
            const Buffer want = NormThenRope(s, opt, rope);
            Buffer out(c.o, s.tokens * s.stride);
            for (size_t i = 0; i < out.size; ++i) out.Set(i, kSentinel);
            QkNorm(s.In(), Rows(out.data(), c.o, s.tokens, s.width, s.stride), h, s.QG(), s.KG(),
                   opt, rope);
            const std::string what = Describe(c, h, target) +
                                     " rotary_dim=" + std::to_string(rotary_dim) +
                                     (with_positions ? " positions" : "");
            EXPECT_EQ(0, std::memcmp(out.data(), want.data(), out.size * SizeOf(c.o))) << what;
            if (c.o == c.t) {  // in place too
              Buffer inplace = s.in;
              QkNorm(s.In(), Rows(s.in.data(), c.t, s.tokens, s.width, s.stride), h, s.QG(), s.KG(),
                     opt, rope);
              int64_t diffs = 0;
              for (int64_t t = 0; t < s.tokens; ++t) {
                for (int64_t i = 0; i < s.QCols() + s.KCols(); ++i) {
                  diffs += s.in.Get(t * s.stride + i) != want.Get(t * s.stride + i) &&
                           !std::isnan(want.Get(t * s.stride + i));
                }
              }
              EXPECT_EQ(diffs, 0) << what << " in place";
              s.in = inplace;
            }
          }
        }
      }
    }
  });
}

// bf16 heads with RoPE whose batch NativeRowOk admits are normalised in one
// loop (NormalizeNativeRows) and rotated after they are stored: the same bits
// as norm-then-RoPE on every target, in and out of place, for batches with a
// head past the bound (subnormals, which go head by head) and without.
TEST(QkNormRope, NativeBf16HeadBatchesEqualNormThenRopeEveryTarget) {
  const uint64_t seed = test::Seed();
  const QkCombo& c = kBf16Combo;
  for (const QkHeads& h : kNativeBatchHeads) {
    for (int rotary_dim : {h.head_dim / 2, h.head_dim, 2}) {
      for (float offset : {0.0f, 1.0f}) {
        NormOptions opt;
        opt.weight_offset = offset;
        QkSetup s = Bf16HeadsPastTheBound(h);
        RopeTables tables(50, rotary_dim, s.tokens);
        const Rope rope = tables.Get(rotary_dim, true);
        const Buffer want = NormThenRope(s, opt, rope);
        const std::string what = Describe(c, h, "") + " rotary_dim " +
                                 std::to_string(rotary_dim) + " offset " + std::to_string(offset) +
                                 ", seed " + std::to_string(seed);
        test::ExpectSameBitsOnEveryTarget(what, [&](const char* target) {
          Buffer out(c.o, s.tokens * s.stride);
          for (size_t i = 0; i < out.size; ++i) out.Set(i, kSentinel);
          QkNorm(s.In(), Rows(out.data(), c.o, s.tokens, s.width, s.stride), h, s.QG(), s.KG(),
                 opt, rope);
          EXPECT_EQ(0, std::memcmp(out.data(), want.data(), out.size * 2))
              << what << " " << target << ": differs from norm then RoPE";
          const Buffer in_before = s.in;
          QkNorm(s.In(), Rows(s.in.data(), c.t, s.tokens, s.width, s.stride), h, s.QG(), s.KG(),
                 opt, rope);
          int64_t diffs = 0;
          for (int64_t t = 0; t < s.tokens; ++t) {
            for (int64_t i = 0; i < s.QCols() + s.KCols(); ++i) {
              diffs += s.in.Get(t * s.stride + i) != want.Get(t * s.stride + i);
            }
          }
          EXPECT_EQ(diffs, 0) << what << " " << target << ": in place";
          s.in = in_before;
          return test::BytesOf(out.data(), out.size * 2);
        });
      }
    }
  }
}

// Against the float64 reference (norm, stored, then rotated in float64):
// within 1 ulp of the output dtype, plus the norm's ulp limit and the float32
// rounding of the products relative to |a| + |b| (a*cos - b*sin can cancel).
TEST(QkNormRope, CloseToFloat64Reference) {
  for (const QkCombo& c : Combos()) {
    const QkHeads h{96, 8, 8, 128};
    NormOptions opt;
    opt.rounding = c.rounding;
    QkSetup s(c, h, 4, 0);
    RopeTables tables(4096, 64, s.tokens);
    const Rope rope = tables.Get(64, true);
    Buffer out(c.o, s.tokens * s.stride), ref(c.o, s.tokens * s.stride),
        normed(c.o, s.tokens * s.stride);
    QkNorm(s.In(), Rows(out.data(), c.o, s.tokens, s.width, s.stride), h, s.QG(), s.KG(), opt,
           rope);
    QkNorm(s.In(), Rows(normed.data(), c.o, s.tokens, s.width, s.stride), h, s.QG(), s.KG(), opt);
    reference::QkNorm(s.In(), Rows(ref.data(), c.o, s.tokens, s.width, s.stride), h, s.QG(), s.KG(),
                      opt, rope);
    int64_t bad = 0;
    std::string first;
    const double ulp_rel = c.o == DType::kF32 ? 0x1p-23 : c.o == DType::kBF16 ? 0x1p-7 : 0x1p-10;
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t head = 0; head < h.num_q_heads + h.num_k_heads; ++head) {
        const int64_t base = t * s.stride + head * h.head_dim;
        for (int64_t i = 0; i < h.head_dim; ++i) {
          const double want = ref.Get(base + i), got = out.Get(base + i);
          // The magnitude the products had: |a| + |b| of the rotated pair.
          const int64_t j = i < 32 ? i + 32 : i < 64 ? i - 32 : i;
          const double mag = std::fabs(normed.Get(base + i)) + std::fabs(normed.Get(base + j));
          // The stored normalised inputs may differ from the reference's by the
          // norm's own ulp limit (4 ulp for f32, 1 otherwise).
          // In cast-then-scale mode with a 16-bit input, x*r may round either
          // way near a midpoint of that dtype (as in RmsNorm's oracle).
          const double cast_rel = c.rounding != Rounding::kCastThenScale ? 0.0
                                  : c.t == DType::kBF16                  ? 0x1p-7
                                  : c.t == DType::kF16                   ? 0x1p-10
                                                                         : 0.0;
          const double tol =
              ulp_rel * std::fabs(want) + std::max(4 * ulp_rel, cast_rel) * mag + 0x1p-22 * mag;
          if (!(std::fabs(got - want) <= tol)) {
            if (bad++ == 0) first = std::to_string(got) + " vs " + std::to_string(want);
          }
        }
      }
    }
    EXPECT_EQ(bad, 0) << Describe(c, h, "best") << ": " << first;
  }
}

// Positions shaped like the leading dims ([B, S]: Transformers' position_ids),
// with any strides, or [1, S] broadcast over the batch: the bits of the same
// positions flattened to [tokens], in the forward and the backward.
TEST(QkNormRope, PositionsShapedLikeLeadingDims) {
  const QkHeads h{2, 1, 1, 8};
  constexpr int64_t kB = 2, kS = 3, kW = 32, kTables = 10;
  std::mt19937_64& rng = test::Rng();  // seeded by test::Seed() (printed)
  std::normal_distribution<float> normal;
  std::vector<uint16_t> qkv(kB * kS * kW), g(8);
  for (auto& v : qkv) v = BF16FromF32(normal(rng));
  for (auto& v : g) v = BF16FromF32(1.0f + 0.25f * normal(rng));
  std::vector<float> cos(kTables * 2), sin(kTables * 2);
  for (auto& v : cos) v = normal(rng);
  for (auto& v : sin) v = normal(rng);
  std::vector<int64_t> flat(kB * kS), transposed(kB * kS);
  for (auto& p : flat) p = static_cast<int64_t>(rng() % kTables);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t s = 0; s < kS; ++s) transposed[s * kB + b] = flat[b * kS + s];
  }
  const ConstTensorView in = Contiguous<const void*>(qkv.data(), DType::kBF16, {kB, kS, kW});
  const ConstTensorView gv = Contiguous<const void*>(g.data(), DType::kBF16, {8});
  const auto rope_with = [&](const ConstTensorView& positions) {
    Rope r;
    r.rotary_dim = 4;
    r.cos = Contiguous<const void*>(cos.data(), DType::kF32, {kTables, 2});
    r.sin = Contiguous<const void*>(sin.data(), DType::kF32, {kTables, 2});
    r.positions = positions;
    return r;
  };
  // qkv_in `qkv_view` (default: [B, S, W]) and a qkv_out of its shape.
  const auto forward = [&](const ConstTensorView& positions,
                           const ConstTensorView* qkv_view = nullptr) {
    std::vector<uint16_t> out(qkv.size(), 0x4242);
    const ConstTensorView& q = qkv_view != nullptr ? *qkv_view : in;
    TensorView o;
    o.data = out.data();
    o.dtype = q.dtype;
    o.rank = q.rank;
    for (int i = 0; i < q.rank; ++i) {
      o.shape[i] = q.shape[i];
      o.stride[i] = q.stride[i];
    }
    QkNorm(q, o, h, gv, gv, {}, rope_with(positions));
    return out;
  };
  const auto backward = [&](const ConstTensorView& positions) {
    std::vector<uint16_t> dqkv_in(qkv.size(), 0x4242), dg(16);
    const auto dqg = Contiguous<void*>(dg.data(), DType::kBF16, {8});
    const auto dkg = Contiguous<void*>(dg.data() + 8, DType::kBF16, {8});
    QkNormBackward(in, in, Contiguous<void*>(dqkv_in.data(), DType::kBF16, {kB, kS, kW}), h, gv,
                   gv, dqg, dkg, {}, rope_with(positions));
    dqkv_in.insert(dqkv_in.end(), dg.begin(), dg.end());
    return dqkv_in;
  };
  const ConstTensorView flat_v = Contiguous<const void*>(flat.data(), DType::kI64, {kB * kS});
  ConstTensorView bs = Contiguous<const void*>(flat.data(), DType::kI64, {kB, kS});
  ConstTensorView bs_transposed = Contiguous<const void*>(transposed.data(), DType::kI64, {kB, kS});
  bs_transposed.stride[0] = 1;
  bs_transposed.stride[1] = kB;
  for (const ConstTensorView* v : {&bs, &bs_transposed}) {
    EXPECT_EQ(forward(*v), forward(flat_v)) << "strides " << v->stride[0] << ", " << v->stride[1];
    EXPECT_EQ(backward(*v), backward(flat_v));
  }
  // [1, S]: every sequence takes the same positions.
  std::vector<int64_t> repeated;
  for (int64_t b = 0; b < kB; ++b) repeated.insert(repeated.end(), flat.begin(), flat.begin() + kS);
  const ConstTensorView one_s = Contiguous<const void*>(flat.data(), DType::kI64, {1, kS});
  const ConstTensorView repeated_v = Contiguous<const void*>(repeated.data(), DType::kI64, {kB * kS});
  EXPECT_EQ(forward(one_s), forward(repeated_v));
  EXPECT_EQ(backward(one_s), backward(repeated_v));
  // [B, 1]: one position for every token of a sequence.
  std::vector<int64_t> per_sequence;
  for (int64_t b = 0; b < kB; ++b) per_sequence.insert(per_sequence.end(), kS, flat[b]);
  EXPECT_EQ(forward(Contiguous<const void*>(flat.data(), DType::kI64, {kB, 1})),
            forward(Contiguous<const void*>(per_sequence.data(), DType::kI64, {kB * kS})));
  // Rank-4 qkv [B, 1, S, W]: positions [B, 1, S], and [1, 1, S] broadcast.
  const ConstTensorView in4 = Contiguous<const void*>(qkv.data(), DType::kBF16, {kB, 1, kS, kW});
  EXPECT_EQ(forward(Contiguous<const void*>(flat.data(), DType::kI64, {kB, 1, kS}), &in4),
            forward(flat_v));
  EXPECT_EQ(forward(Contiguous<const void*>(flat.data(), DType::kI64, {1, 1, kS}), &in4),
            forward(repeated_v));
  // 0 tokens: nothing read or written, whatever the positions' strides.
  const ConstTensorView empty = Contiguous<const void*>(qkv.data(), DType::kBF16, {0, kS, kW});
  ConstTensorView empty_positions = Contiguous<const void*>(flat.data(), DType::kI64, {0, kS});
  empty_positions.stride[0] = int64_t{1} << 62;
  EXPECT_EQ(forward(empty_positions, &empty), std::vector<uint16_t>(qkv.size(), 0x4242));
  // Any other shape is refused; an index out of range is named in the view's shape.
  const auto error = [&](const ConstTensorView& positions) {
    try {
      forward(positions);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(Contiguous<const void*>(flat.data(), DType::kI64, {kS, kB})),
            "QkNorm: rope.positions must be i64 [tokens = 6] or shaped like qkv_in's leading "
            "dims [2, 3] (a dim of 1 is broadcast), got i64 [3, 2]");
  EXPECT_THAT(error(Contiguous<const void*>(flat.data(), DType::kI64, {1, kB * kS})),
              HasSubstr("got i64 [1, 6]"));
  EXPECT_THAT(error(Contiguous<const void*>(flat.data(), DType::kI64, {kB, kS, 1})),
              HasSubstr("got i64 [2, 3, 1]"));
  flat[2] = kTables;  // s = 2 of the broadcast [1, S]: token (0, 2) first
  EXPECT_EQ(error(one_s), "QkNorm: rope.positions[0, 2] must be in [0, 10), got 10");
  flat[2] = 0;
  flat[1 * kS + 2] = kTables;  // token (1, 2)
  EXPECT_EQ(error(bs), "QkNorm: rope.positions[1, 2] must be in [0, 10), got 10");
  transposed[2 * kB + 1] = -1;  // token (1, 2) too
  EXPECT_EQ(error(bs_transposed), "QkNorm: rope.positions[1, 2] must be in [0, 10), got -1");
}

// ---------------------------------------------------------------- errors

struct QkArgs {
  QkHeads h{2, 1, 1, 8};
  std::vector<uint16_t> qkv = std::vector<uint16_t>(3 * 32, BF16FromF32(1.0f));
  std::vector<uint16_t> out = std::vector<uint16_t>(3 * 32, 0x4242);
  std::vector<uint16_t> g = std::vector<uint16_t>(8, BF16FromF32(1.0f));
  std::vector<float> cos = std::vector<float>(10 * 2, 1.0f), sin = std::vector<float>(10 * 2, 0.0f);
  std::vector<int64_t> pos = {0, 1, 2};
  ConstTensorView in = Rows(static_cast<const void*>(qkv.data()), DType::kBF16, 3, 32, 32);
  TensorView outv = Rows(static_cast<void*>(out.data()), DType::kBF16, 3, 32, 32);
  ConstTensorView qg = Contiguous<const void*>(g.data(), DType::kBF16, {8});
  ConstTensorView kg = Contiguous<const void*>(g.data(), DType::kBF16, {8});
  NormOptions opt;
  Rope rope;
  QkArgs() {
    rope.rotary_dim = 4;
    rope.cos = Contiguous<const void*>(cos.data(), DType::kF32, {10, 2});
    rope.sin = Contiguous<const void*>(sin.data(), DType::kF32, {10, 2});
    rope.positions = Contiguous<const void*>(pos.data(), DType::kI64, {3});
  }
};

void ExpectQkError(const std::function<void(QkArgs&)>& mutate, const std::string& fragment) {
  QkArgs a;
  mutate(a);
  const auto before = a.out;
  try {
    QkNorm(a.in, a.outv, a.h, a.qg, a.kg, a.opt, a.rope);
    ADD_FAILURE() << "no error; expected one containing \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("QkNorm: "));
    EXPECT_THAT(e.what(), HasSubstr(fragment));
  }
  EXPECT_EQ(before, a.out) << "written on failure";
}

TEST(QkNorm, Errors) {
  ExpectQkError([](QkArgs& a) { a.h.num_q_heads = 3; },
                "qkv_in width must be (num_q_heads + num_k_heads + num_v_heads) * head_dim = "
                "(3 + 1 + 1) * 8 = 40, got 32");
  ExpectQkError([](QkArgs& a) { a.h.num_k_heads = -1; }, "must be >= 0");
  ExpectQkError([](QkArgs& a) { a.h.head_dim = 0; }, "heads.head_dim must be >= 1, got 0");
  ExpectQkError([](QkArgs& a) { a.in.stride[0] = 24; },
                "qkv_in.stride[0] (row stride) must be >= the QKV width 32 or rows would overlap "
                "heads, got 24");
  ExpectQkError([](QkArgs& a) { a.outv.stride[0] = 16; }, "qkv_out.stride[0] (row stride)");
  ExpectQkError([](QkArgs& a) { a.rope.rotary_dim = 3; },
                "rope.rotary_dim must be 0 (no RoPE) or even and <= head_dim 8, got 3");
  ExpectQkError([](QkArgs& a) { a.rope.rotary_dim = 10; },
                "rope.rotary_dim must be 0 (no RoPE) or even and <= head_dim 8, got 10");
  ExpectQkError([](QkArgs& a) { a.rope.rotary_dim = 6; },
                "rope.cos must be 2-D [positions, rotary_dim/2 = 3], got [10, 2]");
  ExpectQkError([](QkArgs& a) { a.pos[1] = 10; }, "rope.positions[1] must be in [0, 10), got 10");
  // Several sequences ([B, S, W], B > 1) without positions would take table
  // rows 0..B*S-1; one sequence ([1, S, W]) is fine.
  ExpectQkError(
      [](QkArgs& a) {
        a.rope.positions = {};
        a.in = Contiguous<const void*>(a.qkv.data(), DType::kBF16, {3, 1, 32});
        a.outv = Contiguous<void*>(a.out.data(), DType::kBF16, {3, 1, 32});
      },
      "rope.positions is required when qkv_in holds several sequences (leading dims [3, 1]): "
      "without it token t takes table row t of all 3 tokens; pass i64 [3, 1] (Transformers' "
      "position_ids) or [tokens = 3]");
  {
    // An empty batch [2, 0, W] (torch gives it strides [W, W, 1], which do
    // not form rows of one stride): nothing to do, no error.
    QkArgs a;
    a.rope.positions = Contiguous<const void*>(a.pos.data(), DType::kI64, {2, 0});
    a.in = Contiguous<const void*>(a.qkv.data(), DType::kBF16, {2, 0, 32});
    a.outv = Contiguous<void*>(a.out.data(), DType::kBF16, {2, 0, 32});
    a.in.stride[0] = a.outv.stride[0] = 32;
    const auto before = a.out;
    EXPECT_NO_THROW(QkNorm(a.in, a.outv, a.h, a.qg, a.kg, a.opt, a.rope));
    EXPECT_EQ(before, a.out);
  }
  {
    QkArgs a;
    a.rope.positions = {};
    a.in = Contiguous<const void*>(a.qkv.data(), DType::kBF16, {1, 3, 32});
    a.outv = Contiguous<void*>(a.out.data(), DType::kBF16, {1, 3, 32});
    EXPECT_NO_THROW(QkNorm(a.in, a.outv, a.h, a.qg, a.kg, a.opt, a.rope));
  }
  ExpectQkError(
      [](QkArgs& a) {
        a.rope.positions = Contiguous<const void*>(a.cos.data(), DType::kF32, {3});
      },
      "rope.positions.dtype must be i64, got f32");
  // Tables without rotary_dim are a forgotten rotary_dim, not "no RoPE".
  ExpectQkError([](QkArgs& a) { a.rope.rotary_dim = 0; },
                "rope.cos is given but rope.rotary_dim is 0 (no RoPE): set rope.rotary_dim "
                "(GLM-4.5: head_dim / 2 = 4) or leave out rope.cos, rope.sin and rope.positions");
  ExpectQkError(
      [](QkArgs& a) {
        a.rope.rotary_dim = 0;
        a.rope.cos = {};
        a.rope.sin = {};
      },
      "rope.positions is given but rope.rotary_dim is 0");
  ExpectQkError([](QkArgs& a) { a.rope.sin = {}; },
                "rope.rotary_dim 4 needs rope.sin, f32 [positions, rotary_dim / 2 = 2]; none was "
                "given");
  ExpectQkError([](QkArgs& a) { a.kg.shape[0] = 7; }, "k_gamma length must equal the width 8");
  ExpectQkError(
      [](QkArgs& a) {
        a.qg.dtype = DType::kF16;
        a.kg.dtype = DType::kF16;
      },
      "q_gamma.dtype must be f32 or qkv_in's dtype bf16, got f16");
  ExpectQkError([](QkArgs& a) { a.kg.dtype = DType::kF16; },
                "k_gamma.dtype must equal q_gamma.dtype bf16, got f16");
  ExpectQkError([](QkArgs& a) { a.outv.dtype = DType::kF32; },
                "qkv_out.dtype must be bf16 in cast-then-scale mode");
  ExpectQkError(
      [](QkArgs& a) {
        a.outv.data = const_cast<void*>(a.in.data);
        a.outv.stride[0] = 33;
        a.outv.shape[0] = 2;
        a.in.shape[0] = 2;
      },
      "qkv_out overlaps qkv_in");
}

}  // namespace
}  // namespace glmnorm
