// QkNormBackward: each q and k head of a fused QKV gradient against the
// oracle, one dgamma each; v columns untouched; in place; errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "ops/backward_test_util.h"
#include "ops/rms_norm/rms_norm_backward_job.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using test::Buffer;

// The heads [first, first + n) of a 2-D QKV view as [tokens, n, head_dim].
template <typename Ptr>
BasicTensorView<Ptr> HeadsView(Ptr data, DType t, int64_t tokens, int64_t row_stride,
                               int64_t first, int64_t n, int64_t hd) {
  BasicTensorView<Ptr> v;
  v.data = static_cast<Ptr>(static_cast<std::conditional_t<
                                std::is_const_v<std::remove_pointer_t<Ptr>>, const char, char>*>(
                                data) +
                            first * hd * SizeOf(t));
  v.dtype = t;
  v.rank = 3;
  v.shape[0] = tokens, v.shape[1] = n, v.shape[2] = hd;
  v.stride[0] = row_stride, v.stride[1] = hd, v.stride[2] = 1;
  return v;
}

TEST(QkNormBackward, HeadsOfAFusedBufferEveryTarget) {
  test::Seed();
  bwdtest::Totals totals;
  test::ForEachTarget([&](const char* target) {
    for (DType t : {DType::kBF16, DType::kF32, DType::kF16}) {
      for (Rounding rounding : {Rounding::kCastThenScale, Rounding::kSingle}) {
        const QkHeads heads{12, 2, 2, 128};
        const int64_t tokens = 70, hd = heads.head_dim;
        const int64_t width = (12 + 2 + 2) * hd, stride = width + 24;  // padded rows
        NormOptions opt;
        opt.rounding = rounding;
        Buffer qkv(t, tokens * stride), dout(t, tokens * stride), din(t, tokens * stride),
            qg(t, hd), kg(t, hd), dqg(DType::kF32, hd), dkg(DType::kF32, hd);
        bwdtest::FillRows(qkv, tokens, stride);
        bwdtest::FillRows(dout, tokens, stride);
        test::FillGamma(qg);
        test::FillGamma(kg);
        for (size_t i = 0; i < din.size; ++i) din.Set(i, 768.0);
        const auto qkvv = Rows<const void*>(qkv.data(), t, tokens, width, stride);
        const auto doutv = Rows<const void*>(dout.data(), t, tokens, width, stride);
        const auto dinv = Rows<void*>(din.data(), t, tokens, width, stride);
        const auto qgv = Contiguous<const void*>(qg.data(), t, {hd});
        const auto kgv = Contiguous<const void*>(kg.data(), t, {hd});
        QkNormBackward(qkvv, doutv, dinv, heads, qgv, kgv,
                       Contiguous<void*>(dqg.data(), DType::kF32, {hd}),
                       Contiguous<void*>(dkg.data(), DType::kF32, {hd}), opt);
        const std::string what = std::string(target) + " " + std::string(Name(t)) +
                                 (rounding == Rounding::kSingle ? " single" : " cast");
        const int64_t first[2] = {0, 12}, count[2] = {12, 2};
        Buffer* dgs[2] = {&dqg, &dkg};
        const ConstTensorView gs[2] = {qgv, kgv};
        for (int k = 0; k < 2; ++k) {
          const auto xv = HeadsView<const void*>(qkv.data(), t, tokens, stride, first[k], count[k], hd);
          const auto dyv = HeadsView<const void*>(dout.data(), t, tokens, stride, first[k], count[k], hd);
          const auto dxv = HeadsView<const void*>(din.data(), t, tokens, stride, first[k], count[k], hd);
          const auto ref = reference::RmsNormBackward(xv, gs[k], dyv, opt);
          bwdtest::CheckAgainstOracle(
              ref, dxv, Contiguous<const void*>(dgs[k]->data(), DType::kF32, {hd}),
              what + (k ? " k" : " q"), totals);
        }
        // v columns and the row padding untouched.
        int64_t touched = 0;
        for (int64_t tok = 0; tok < tokens; ++tok) {
          for (int64_t i = 14 * hd; i < stride; ++i) touched += din.Get(tok * stride + i) != 768.0;
        }
        EXPECT_EQ(touched, 0) << what << ": wrote v columns or padding";
        // In place over dqkv_out: the same q/k bits.
        Buffer d2 = dout;
        const auto d2v = Rows<void*>(d2.data(), t, tokens, width, stride);
        QkNormBackward(qkvv, AsConst(d2v), d2v, heads, qgv, kgv,
                       Contiguous<void*>(dqg.data(), DType::kF32, {hd}),
                       Contiguous<void*>(dkg.data(), DType::kF32, {hd}), opt);
        int64_t differ = 0;
        for (int64_t tok = 0; tok < tokens; ++tok) {
          differ += std::memcmp(static_cast<char*>(d2.data()) + tok * stride * SizeOf(t),
                                static_cast<char*>(din.data()) + tok * stride * SizeOf(t),
                                14 * hd * SizeOf(t)) != 0;
        }
        EXPECT_EQ(differ, 0) << what << ": in place differs";
      }
    }
  });
  totals.ExpectBars("QkNormBackward");
}

// The bits of a backward's outputs, dqkv_in then dq_gamma and dk_gamma.
std::vector<uint8_t> OutputBits(const Buffer& din, const Buffer& dq, const Buffer& dk) {
  std::vector<uint8_t> bits(din.bytes.begin(), din.bytes.end());
  bits.insert(bits.end(), dq.bytes.begin(), dq.bytes.end());
  bits.insert(bits.end(), dk.bytes.begin(), dk.bytes.end());
  return bits;
}

// The RoPE backward on rotations whose products are exact: cos 1 / sin 0
// (identity) must give the bits of the backward without RoPE; cos 0 / sin 1
// (a quarter turn: lo = -b, hi = a) the bits of the backward without RoPE
// fed dy with each rotated pair (dlo, dhi) replaced by (dhi, -dlo). The rows
// of the tables are picked through positions; in place over dqkv_out too,
// with heads un-rotated in the norm's row loop (16) and by their own pass
// (wider than kMaxRopeRowWidth).
TEST(QkNormBackward, RopeBackwardOnExactRotations) {
  test::Seed();
  for (DType t : {DType::kBF16, DType::kF32}) {
    for (const int64_t hd : {int64_t{16}, kMaxRopeRowWidth + 16}) {
      const QkHeads heads{3, 1, 1, static_cast<int>(hd)};
      const int64_t tokens = 5, rotary = 8, half = 4, width = 5 * hd, stride = width + 3;
      Buffer qkv(t, tokens * stride), dout(t, tokens * stride), qg(t, hd), kg(t, hd);
      bwdtest::FillRows(qkv, tokens, stride);
      bwdtest::FillRows(dout, tokens, stride);
      test::FillGamma(qg);
      test::FillGamma(kg);
      // Table rows: 0 the identity, 1 the quarter turn (positions choose per token).
      std::vector<float> cos = {1, 1, 1, 1, 0, 0, 0, 0}, sin = {0, 0, 0, 0, 1, 1, 1, 1};
      std::vector<int64_t> positions = {1, 0, 1, 1, 0};
      Rope rope;
      rope.rotary_dim = static_cast<int>(rotary);
      rope.cos = Contiguous<const void*>(cos.data(), DType::kF32, {2, half});
      rope.sin = Contiguous<const void*>(sin.data(), DType::kF32, {2, half});
      rope.positions = Contiguous<const void*>(positions.data(), DType::kI64, {tokens});
      // The expected un-rotated dy, built by hand from the rotation's definition.
      Buffer dy_plain = dout;
      for (int64_t tok = 0; tok < tokens; ++tok) {
        if (positions[tok] != 1) continue;
        for (int64_t head = 0; head < 4; ++head) {
          const int64_t o = tok * stride + head * hd;
          for (int64_t i = 0; i < half; ++i) {
            dy_plain.Set(o + i, dout.Get(o + half + i));
            dy_plain.Set(o + half + i, -dout.Get(o + i));
          }
        }
      }
      const auto qkvv = Rows<const void*>(qkv.data(), t, tokens, width, stride);
      const auto qgv = Contiguous<const void*>(qg.data(), t, {hd});
      const auto kgv = Contiguous<const void*>(kg.data(), t, {hd});
      auto run = [&](const Buffer& dy, const Rope& r, bool in_place) {
        Buffer din = dy, dq(DType::kF32, hd), dk(DType::kF32, hd);
        if (!in_place) std::memset(din.data(), 0, din.size * SizeOf(t));
        QkNormBackward(
            qkvv, Rows<const void*>(in_place ? din.data() : dy.data(), t, tokens, width, stride),
            Rows<void*>(din.data(), t, tokens, width, stride), heads, qgv, kgv,
            Contiguous<void*>(dq.data(), DType::kF32, {hd}),
            Contiguous<void*>(dk.data(), DType::kF32, {hd}), NormOptions{}, r);
        std::vector<uint8_t> bits = OutputBits(din, dq, dk);
        // v columns come from dqkv_out in place, are untouched otherwise: compare q and k only
        for (int64_t tok = 0; tok < tokens; ++tok) {
          std::memset(bits.data() + din.offset + (tok * stride + 4 * hd) * SizeOf(t), 0,
                      (stride - 4 * hd) * SizeOf(t));
        }
        return bits;
      };
      const auto want = run(dy_plain, Rope{}, false);
      EXPECT_EQ(run(dout, rope, false), want)
          << Name(t) << " head_dim " << hd << ": RoPE backward vs hand rotation";
      EXPECT_EQ(run(dout, rope, true), want) << Name(t) << " head_dim " << hd << ": in place";
    }
  }
}

// The RoPE backward at general angles, on every compiled SIMD target, is bit
// for bit the backward without RoPE fed the float64 un-rotation written out
// here (the reference of RotateHeadBackward, simd/rope-inl.h: exact products,
// one float64 sum, rounded to float32 and then to the dtype). Odd head dims
// and rotary halves not a multiple of any vector width; tables with padded
// rows; positions out of order; heads un-rotated in the norm's row loop (up
// to kMaxRopeRowWidth) and by the pass of their own (wider).
TEST(QkNormBackward, RopeBackwardOnEveryTargetIsTheFloat64Unrotation) {
  test::Seed();
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (const auto& [hd, rotary] : {std::pair<int64_t, int64_t>{48, 24}, {130, 66}, {128, 64},
                                       {64, 64}, {kMaxRopeRowWidth, 64},
                                       {kMaxRopeRowWidth + 16, 64}}) {
      const QkHeads heads{3, 2, 1, static_cast<int>(hd)};
      const int64_t tokens = 7, width = 6 * hd, stride = width + 5, half = rotary / 2;
      const int64_t table_rows = 11, table_stride = half + 3;
      Buffer qkv(t, tokens * stride), dout(t, tokens * stride), qg(t, hd), kg(t, hd);
      bwdtest::FillRows(qkv, tokens, stride);
      bwdtest::FillRows(dout, tokens, stride);
      test::FillGamma(qg);
      test::FillGamma(kg);
      std::vector<float> cos(table_rows * table_stride), sin(table_rows * table_stride);
      for (int64_t r = 0; r < table_rows; ++r) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = (r + 1) * std::pow(10000.0, -2.0 * i / rotary);
          cos[r * table_stride + i] = static_cast<float>(std::cos(angle));
          sin[r * table_stride + i] = static_cast<float>(std::sin(angle));
        }
      }
      std::vector<int64_t> positions = {3, 10, 0, 7, 7, 1, 9};
      Rope rope;
      rope.rotary_dim = static_cast<int>(rotary);
      rope.cos = Rows<const void*>(cos.data(), DType::kF32, table_rows, half, table_stride);
      rope.sin = Rows<const void*>(sin.data(), DType::kF32, table_rows, half, table_stride);
      rope.positions = Contiguous<const void*>(positions.data(), DType::kI64, {tokens});
      Buffer dy_plain = dout;
      for (int64_t tok = 0; tok < tokens; ++tok) {
        const float* c = cos.data() + positions[tok] * table_stride;
        const float* sn = sin.data() + positions[tok] * table_stride;
        for (int64_t head = 0; head < 5; ++head) {
          const int64_t o = tok * stride + head * hd;
          for (int64_t i = 0; i < half; ++i) {
            const double lo = dout.Get(o + i), hi = dout.Get(o + half + i);
            dy_plain.Set(o + i, static_cast<float>(lo * c[i] + hi * sn[i]));
            dy_plain.Set(o + half + i, static_cast<float>(hi * c[i] - lo * sn[i]));
          }
        }
      }
      const auto qkvv = Rows<const void*>(qkv.data(), t, tokens, width, stride);
      const auto qgv = Contiguous<const void*>(qg.data(), t, {hd});
      const auto kgv = Contiguous<const void*>(kg.data(), t, {hd});
      auto run = [&](const Buffer& dy, const Rope& r) {
        Buffer din(t, tokens * stride), dq(DType::kF32, hd), dk(DType::kF32, hd);
        QkNormBackward(qkvv, Rows<const void*>(dy.data(), t, tokens, width, stride),
                       Rows<void*>(din.data(), t, tokens, width, stride), heads, qgv, kgv,
                       Contiguous<void*>(dq.data(), DType::kF32, {hd}),
                       Contiguous<void*>(dk.data(), DType::kF32, {hd}), NormOptions{}, r);
        return OutputBits(din, dq, dk);
      };
      const auto want = run(dy_plain, Rope{});
      test::ForEachTarget([&](const char* target) {
        EXPECT_EQ(run(dout, rope), want) << Name(t) << " head_dim " << hd << " rotary " << rotary
                                         << " on " << target;
      });
    }
  }
}

TEST(QkNormBackward, Errors) {
  const QkHeads heads{2, 1, 1, 4};
  Buffer qkv(DType::kBF16, 32), d(DType::kBF16, 32), g(DType::kBF16, 4), dg(DType::kF32, 8);
  const auto qv = Rows<const void*>(qkv.data(), DType::kBF16, 2, 16, 16);
  const auto dv = Rows<void*>(d.data(), DType::kBF16, 2, 16, 16);
  const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {4});
  const auto dq = Contiguous<void*>(dg.data(), DType::kF32, {4});
  const auto dk = Contiguous<void*>(static_cast<float*>(dg.data()) + 4, DType::kF32, {4});
  const auto expect = [](const std::function<void()>& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected " << fragment;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("QkNormBackward: " + fragment));
    }
  };
  expect([&] { QkNormBackward(qv, AsConst(dv), dv, QkHeads{2, 1, 2, 4}, gv, gv, dq, dk); },
         "qkv width must be (num_q_heads + num_k_heads + num_v_heads) * head_dim = "
         "(2 + 1 + 2) * 4 = 20, got 16");
  // The head checks are the forward's (detail::ValidateQkHeads).
  expect([&] { QkNormBackward(qv, AsConst(dv), dv, QkHeads{0, 0, 4, 4}, gv, gv, dq, dk); },
         "heads.num_q_heads + num_k_heads must be >= 1, got 0");
  expect([&] {
    QkNormBackward(qv, AsConst(dv), dv, QkHeads{1 << 30, 1 << 30, 0, 1 << 30}, gv, gv, dq, dk);
  }, "(num_q_heads + num_k_heads + num_v_heads) * head_dim overflows");
  // The forward's gamma dtype rule (f32 or qkv's dtype; q and k alike).
  {
    Buffer g16(DType::kF16, 4);
    const auto g16v = Contiguous<const void*>(g16.data(), DType::kF16, {4});
    expect([&] { QkNormBackward(qv, AsConst(dv), dv, heads, g16v, g16v, dq, dk); },
           "q_gamma.dtype must be f32 or qkv's dtype bf16, got f16");
    expect([&] { QkNormBackward(qv, AsConst(dv), dv, heads, gv, g16v, dq, dk); },
           "k_gamma.dtype must equal q_gamma.dtype bf16, got f16");
  }
  // Each gamma is named: the norm backward's checks run once per head group.
  {
    auto short_g = gv;
    short_g.shape[0] = 3;
    expect([&] { QkNormBackward(qv, AsConst(dv), dv, heads, short_g, gv, dq, dk); },
           "q_gamma length must equal the width 4, got 3");
    expect([&] { QkNormBackward(qv, AsConst(dv), dv, heads, gv, short_g, dq, dk); },
           "k_gamma length must equal the width 4, got 3");
  }
  // Positions outside the tables, found by the backend's check job.
  {
    float cos[2] = {1, 1}, sin[2] = {0, 0};
    int64_t positions[2] = {1, 5};
    Rope rope;
    rope.rotary_dim = 2;
    rope.cos = Contiguous<const void*>(cos, DType::kF32, {2, 1});
    rope.sin = Contiguous<const void*>(sin, DType::kF32, {2, 1});
    rope.positions = Contiguous<const void*>(positions, DType::kI64, {2});
    expect([&] {
      QkNormBackward(qv, AsConst(dv), dv, heads, gv, gv, dq, dk, NormOptions{}, rope);
    }, "rope.positions[1] must be in [0, 2), got 5");
    // The k heads' run reads the positions after dq_gamma is written.
    int64_t shared[3] = {0, 1, 0};
    rope.positions = Contiguous<const void*>(shared, DType::kI64, {2});
    const auto dq_over_positions =
        Contiguous<void*>(reinterpret_cast<float*>(shared) + 1, DType::kF32, {4});
    expect([&] {
      QkNormBackward(qv, AsConst(dv), dv, heads, gv, gv, dq_over_positions, dk, NormOptions{},
                     rope);
    }, "dq_gamma overlaps rope.positions");
  }
  expect([&] { QkNormBackward(qv, AsConst(dv), dv, heads, gv, gv, dq, dq); },
         "dk_gamma must not be the same memory as dq_gamma");
  expect([&] {
    QkNormBackward(qv, AsConst(dv), dv, heads, gv, gv, dq,
                   Contiguous<void*>(static_cast<float*>(dg.data()) + 4, DType::kF32, {3}));
  }, "dk_gamma length must equal the width 4, got 3");
  expect([&] {
    QkNormBackward(qv, AsConst(dv), Rows<void*>(d.data(), DType::kF32, 2, 16, 16), heads, gv, gv,
                   dq, dk);
  }, "dqkv_in");
}

}  // namespace
}  // namespace glmnorm
