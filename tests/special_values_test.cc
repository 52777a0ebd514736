// Special values through every op, every input and every compiled SIMD
// target: each output bit (NaN sign included) is the same on every target,
// and matches the reference (float64 oracle for the norms, the scalar
// quantisers of quant_reference.cc for the quantised outputs, a scalar float32
// model of the RoPE rotation that qk_norm.h defines).
//
// One table of ops (kOps) x the inputs each op reads x kSpecials x the
// placements of the special value (three lanes of one row, a whole row, or
// three gamma / cos / sin entries) x dtype combinations x targets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "glmnorm/quant.h"
#include "ops/cases.h"
#include "ops/quant/quant_cases.h"
#include "reference/reference.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

using test::Buffer;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Special {
  const char* name;
  float value;
};

// NaN of both signs, infinities, signed zeros, subnormals, the edges of
// float32 and of each output format, and rounding ties of bf16 / f16 / e4m3.
const Special kSpecials[] = {
    {"+nan", std::numeric_limits<float>::quiet_NaN()},
    {"-nan", -std::numeric_limits<float>::quiet_NaN()},
    {"+inf", kInf},
    {"-inf", -kInf},
    {"+0", 0.0f},
    {"-0", -0.0f},
    {"min_subnormal", std::numeric_limits<float>::denorm_min()},
    {"-max_subnormal", -std::nextafter(std::numeric_limits<float>::min(), 0.0f)},
    {"min_normal", std::numeric_limits<float>::min()},
    {"max", std::numeric_limits<float>::max()},
    {"-max", -std::numeric_limits<float>::max()},
    {"bf16_max", 0x1.FEp127f},
    {"f16_max", 65504.0f},
    {"f16_overflow_tie", 65520.0f},
    {"e4m3_max", 448.0f},
    {"e4m3_beyond_max_tie", 464.0f},
    {"bf16_tie", 1.00390625f},       // 1 + 2^-8: halfway between two bf16
    {"f16_tie", 1.00048828125f},     // 1 + 2^-11
    {"huge", 1e30f},
    {"tiny", 1e-30f},
};

// Where a special value goes in an activation [rows, width]: three lanes
// (first, middle, last) of row 1, or all of row 2. In a gamma or a RoPE
// table: its first, middle and last entry.
enum class Place { kLanes, kWholeRow };

struct Combo {
  DType t, w;
  Rounding rounding;
};

// The combinations every norm op accepts (src/ops/cases.h).
std::vector<Combo> Combos() {
  std::vector<Combo> c;
  for (const cases::NormDTypes& d : cases::CommonNormDTypes(/*single_to_f32=*/false)) {
    c.push_back({d.x, d.w, d.rounding});
  }
  return c;
}

// The output dtype of a norm for the combo (PyTorch's promotion, or the
// input dtype in single rounding).
DType OutType(const Combo& c) {
  return c.rounding == Rounding::kCastThenScale ? Promote(c.w, c.t) : c.t;
}

std::string ComboName(const Combo& c) {
  return "x=" + std::string(Name(c.t)) + " w=" + std::string(Name(c.w)) +
         (c.rounding == Rounding::kCastThenScale ? " cast-then-scale" : " single");
}

// Deterministic inputs for one case (the same on every target).
struct Rng {
  explicit Rng(uint64_t seed) : gen(seed) {}
  double Normal() { return dist(gen); }
  std::mt19937_64 gen;
  std::normal_distribution<double> dist{0.0, 1.0};
};

void Fill(Buffer& b, Rng& rng, double scale, double offset = 0.0) {
  for (size_t i = 0; i < b.size; ++i) b.Set(i, offset + scale * rng.Normal());
}

void Inject(Buffer& b, int64_t rows, int64_t width, Place place, float v) {
  if (rows == 1 || place == Place::kLanes) {
    const int64_t row = rows > 1 ? 1 : 0;
    for (int64_t i : {int64_t{0}, width / 2, width - 1}) b.Set(row * width + i, v);
  } else {
    for (int64_t i = 0; i < width; ++i) b.Set(2 * width + i, v);
  }
}

// Every byte an op wrote, in a fixed order, to compare targets bitwise.
using Bytes = std::vector<uint8_t>;
void Append(Bytes* out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}
void Append(Bytes* out, const Buffer& b) { Append(out, b.data(), b.size * SizeOf(b.dtype)); }

// Element i of both buffers, for a failure message.
std::string Describe(const Buffer& got, const Buffer& want, int64_t i) {
  const double g = got.Get(i), w = want.Get(i);
  return "element " + std::to_string(i) + ": got " + std::to_string(g) +
         (std::signbit(g) ? " (sign -)" : "") + ", reference " + std::to_string(w) +
         (std::signbit(w) ? " (sign -)" : "");
}

test::UlpStats Compare(const Buffer& got, const Buffer& want) {
  return test::CompareUlp(got.dtype, got.data(), want.data(), static_cast<int64_t>(got.size));
}

// NaN outputs must be NaN in the reference too, with the same sign; the
// values themselves are checked by the ulp comparisons.
std::string CompareNaNs(const Buffer& got, const Buffer& want) {
  const test::UlpStats s = Compare(got, want);
  return s.nan_mismatches == 0 ? "" : Describe(got, want, s.first_nan_mismatch);
}

// Exact equality of every element with the reference (NaN: same sign).
std::string CompareExact(const Buffer& got, const Buffer& want) {
  const test::UlpStats s = Compare(got, want);
  return s.bit_mismatches == 0 ? "" : Describe(got, want, s.first_bit_mismatch);
}

std::string CompareOracle(const ConstTensorView& x, const ConstTensorView& g,
                          const Buffer& y, DType y_type, const NormOptions& opt) {
  const auto yv = Contiguous<const void*>(y.data(), y_type, {x.rows(), x.width()});
  const auto stats = test::CompareWithOracle(x, g, yv, opt, test::UlpLimit(y_type));
  if (stats.over_limit > 0) return "oracle: " + stats.first_failure;
  Buffer want(y_type, y.size);
  reference::RmsNorm(x, g, Contiguous<void*>(want.data(), y_type, {x.rows(), x.width()}), opt);
  const std::string nan = CompareNaNs(y, want);
  return nan.empty() ? "" : "oracle NaN: " + nan;
}

// ---------------------------------------------------------------- the ops

// One run of an op case: the inputs, the special and where it goes.
struct Case {
  Combo combo;
  std::string input;   // which input holds the special value
  float special;
  Place place;
  uint64_t seed;
  // Quantised ops only.
  DType q = DType::kI8;
  bool dynamic = false;
  float scale = 1.0f;
};

constexpr int64_t kRows = 3, kWidth = 37;

// Runs the op on the current target; returns its output bytes and, in
// *failure, the first disagreement with the reference ("" if none).
using RunFn = std::function<Bytes(const Case&, std::string* failure)>;

struct Op {
  const char* name;
  std::vector<std::string> inputs;
  bool quantised;
  RunFn run;
};

Bytes RunRmsNorm(const Case& c, std::string* failure) {
  Rng rng(c.seed);
  Buffer x(c.combo.t, kRows * kWidth), g(c.combo.w, kWidth), y(OutType(c.combo), kRows * kWidth);
  Fill(x, rng, 1.0);
  Fill(g, rng, 0.3, 1.0);
  Inject(c.input == "x" ? x : g, c.input == "x" ? kRows : 1, kWidth, c.place, c.special);
  NormOptions opt;
  opt.rounding = c.combo.rounding;
  const auto xv = Contiguous<const void*>(x.data(), x.dtype, {kRows, kWidth});
  const auto gv = Contiguous<const void*>(g.data(), g.dtype, {kWidth});
  RmsNorm(xv, gv, Contiguous<void*>(y.data(), y.dtype, {kRows, kWidth}), opt);
  *failure = CompareOracle(xv, gv, y, y.dtype, opt);
  Bytes out;
  Append(&out, y);
  return out;
}

// The inputs of the fused-add ops for a case: residual, delta and gamma,
// with the case's special value in the input it names.
struct AddInputs {
  explicit AddInputs(const Case& c)
      : res(c.combo.t, kRows * kWidth), delta(c.combo.t, kRows * kWidth), g(c.combo.w, kWidth) {
    Rng rng(c.seed);
    Fill(res, rng, 1.0);
    Fill(delta, rng, 0.5);
    Fill(g, rng, 0.3, 1.0);
    Buffer& target = c.input == "residual" ? res : c.input == "delta" ? delta : g;
    Inject(target, c.input == "gamma" ? 1 : kRows, kWidth, c.place, c.special);
  }
  static TensorView Rows(Buffer& b) { return Contiguous<void*>(b.data(), b.dtype, {kRows, kWidth}); }
  ConstTensorView D() const {
    return Contiguous<const void*>(delta.data(), delta.dtype, {kRows, kWidth});
  }
  ConstTensorView G() const { return Contiguous<const void*>(g.data(), g.dtype, {kWidth}); }
  Buffer res, delta, g;
};

Bytes RunAddRmsNorm(const Case& c, std::string* failure) {
  AddInputs in(c);
  Buffer& res = in.res;
  Buffer y(OutType(c.combo), kRows * kWidth);
  Buffer want_res = res, want_y = y;
  AddNormOptions opt;
  opt.rounding = c.combo.rounding;
  AddRmsNorm(AddInputs::Rows(res), in.D(), in.G(), AddInputs::Rows(y), opt);
  reference::AddRmsNorm(AddInputs::Rows(want_res), in.D(), in.G(), AddInputs::Rows(want_y), opt);
  // The stored sum is one float32 add, rounded once: exact. y is RmsNorm of
  // that stored sum (normalize_rounded_sum).
  *failure = CompareExact(res, want_res);
  if (failure->empty()) {
    *failure = CompareOracle(AsConst(AddInputs::Rows(res)), in.G(), y, y.dtype, opt);
  }
  if (!failure->empty()) *failure = "AddRmsNorm " + *failure;
  Bytes out;
  Append(&out, res);
  Append(&out, y);
  return out;
}

// Quantised outputs: the library's own y (checked above against the oracle)
// through the reference quantisers and DynamicScale.
std::string CompareQuant(const Case& c, const Buffer& y, const std::vector<uint8_t>& q,
                         const std::vector<float>& scales) {
  std::vector<float> v(kWidth);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < kWidth; ++i) v[i] = static_cast<float>(y.Get(r * kWidth + i));
    const float s = c.dynamic ? reference::DynamicScale(v.data(), kWidth, c.q) : c.scale;
    if (c.dynamic && std::memcmp(&s, &scales[r], 4) != 0) {
      return "scale of row " + std::to_string(r) + ": got " + std::to_string(scales[r]) +
             ", reference " + std::to_string(s);
    }
    for (int64_t i = 0; i < kWidth; ++i) {
      const uint8_t want = c.q == DType::kI8
                               ? static_cast<uint8_t>(reference::QuantizeI8(v[i], s))
                               : reference::QuantizeE4M3(v[i], s);
      if (q[r * kWidth + i] != want) {
        char msg[160];
        std::snprintf(msg, sizeof(msg), "row %lld col %lld: y=%g scale=%g q=0x%02X, reference 0x%02X",
                      (long long)r, (long long)i, v[i], s, q[r * kWidth + i], want);
        return msg;
      }
    }
  }
  return "";
}

QuantOptions MakeQuant(const Case& c, std::vector<float>* scales) {
  QuantOptions qo;
  qo.scaling = c.dynamic ? QuantScaling::kDynamicPerToken : QuantScaling::kStatic;
  qo.scale = c.scale;
  scales->assign(kRows, -1.0f);
  qo.scales = Contiguous<void*>(scales->data(), DType::kF32, {kRows});
  return qo;
}


Bytes RunRmsNormQuant(const Case& c, std::string* failure) {
  Rng rng(c.seed);
  Buffer x(c.combo.t, kRows * kWidth), g(c.combo.w, kWidth),
      y(cases::QuantValueType(c.combo.t, c.combo.w, c.combo.rounding), kRows * kWidth);
  Fill(x, rng, 1.0);
  Fill(g, rng, 0.3, 1.0);
  Inject(c.input == "x" ? x : g, c.input == "x" ? kRows : 1, kWidth, c.place, c.special);
  NormOptions opt;
  opt.rounding = c.combo.rounding;
  const auto xv = Contiguous<const void*>(x.data(), x.dtype, {kRows, kWidth});
  const auto gv = Contiguous<const void*>(g.data(), g.dtype, {kWidth});
  RmsNorm(xv, gv, Contiguous<void*>(y.data(), y.dtype, {kRows, kWidth}), opt);
  std::vector<uint8_t> q(kRows * kWidth, 0xAA);
  std::vector<float> scales;
  RmsNormQuant(xv, gv, Contiguous<void*>(q.data(), c.q, {kRows, kWidth}), MakeQuant(c, &scales),
               opt);
  *failure = CompareQuant(c, y, q, scales);
  Bytes out;
  Append(&out, q.data(), q.size());
  Append(&out, scales.data(), scales.size() * 4);
  return out;
}

Bytes RunAddRmsNormQuant(const Case& c, std::string* failure) {
  AddInputs in(c);
  Buffer& res = in.res;
  Buffer y(cases::QuantValueType(c.combo.t, c.combo.w, c.combo.rounding), kRows * kWidth);
  Buffer res_y = res;
  AddNormOptions opt;
  opt.rounding = c.combo.rounding;
  const auto dv = in.D();
  const auto gv = in.G();
  AddRmsNorm(AddInputs::Rows(res_y), dv, gv, AddInputs::Rows(y), opt);
  std::vector<uint8_t> q(kRows * kWidth, 0xAA);
  std::vector<float> scales;
  AddRmsNormQuant(AddInputs::Rows(res), dv, gv,
                  Contiguous<void*>(q.data(), c.q, {kRows, kWidth}), MakeQuant(c, &scales), opt);
  *failure = CompareExact(res, res_y);
  if (failure->empty()) *failure = CompareQuant(c, y, q, scales);
  Bytes out;
  Append(&out, res);
  Append(&out, q.data(), q.size());
  Append(&out, scales.data(), scales.size() * 4);
  return out;
}

// QkNorm of 2 q heads, 1 k head and 1 v head of 16 in a padded row, with
// RoPE over 10 dims (rotary_dim < head_dim, as GLM's partial RoPE).
Bytes RunQkNorm(const Case& c, std::string* failure) {
  const QkHeads h{2, 1, 1, 16};
  const int64_t tokens = kRows, width = 4 * 16, stride = width + 3, half = 5;
  const bool rope_on = c.input == "cos" || c.input == "sin" || c.input.ends_with("+rope");
  Rng rng(c.seed);
  const DType o = OutType(c.combo);
  Buffer in(c.combo.t, tokens * stride), qg(c.combo.w, 16), kg(c.combo.w, 16),
      out(o, tokens * stride), normed(o, tokens * stride);
  Fill(in, rng, 1.0);
  Fill(qg, rng, 0.3, 1.0);
  Fill(kg, rng, 0.3, 1.0);
  Buffer cos(DType::kF32, tokens * half), sin(DType::kF32, tokens * half);
  for (size_t i = 0; i < cos.size; ++i) {
    const double angle = rng.Normal();
    cos.Set(i, std::cos(angle));
    sin.Set(i, std::sin(angle));
  }
  const std::string input = c.input.substr(0, c.input.find('+'));
  if (input == "qkv") {
    // One token's q, k and v heads (lanes) or a whole token row.
    for (int64_t i : {int64_t{0}, int64_t{21}, int64_t{47}, int64_t{55}}) {
      if (c.place == Place::kLanes) in.Set(1 * stride + i, c.special);
    }
    if (c.place == Place::kWholeRow) {
      for (int64_t i = 0; i < width; ++i) in.Set(2 * stride + i, c.special);
    }
  } else if (input == "q_gamma" || input == "k_gamma") {
    Inject(input == "q_gamma" ? qg : kg, 1, 16, c.place, c.special);
  } else {
    Inject(input == "cos" ? cos : sin, tokens, half, c.place, c.special);
  }
  NormOptions opt;
  opt.rounding = c.combo.rounding;
  for (size_t i = 0; i < out.size; ++i) out.Set(i, -7.0), normed.Set(i, -7.0);
  const auto inv = Rows<const void*>(in.data(), in.dtype, tokens, width, stride);
  const auto qgv = Contiguous<const void*>(qg.data(), qg.dtype, {16});
  const auto kgv = Contiguous<const void*>(kg.data(), kg.dtype, {16});
  Rope rope;
  if (rope_on) {
    rope.rotary_dim = 2 * half;
    rope.cos = Contiguous<const void*>(cos.data(), DType::kF32, {tokens, half});
    rope.sin = Contiguous<const void*>(sin.data(), DType::kF32, {tokens, half});
  }
  QkNorm(inv, Rows<void*>(out.data(), o, tokens, width, stride), h, qgv, kgv, opt, rope);
  QkNorm(inv, Rows<void*>(normed.data(), o, tokens, width, stride), h, qgv, kgv, opt);
  // The norm: each head against the oracle, as [tokens, heads, 16] views.
  for (int which = 0; which < 2 && failure->empty(); ++which) {
    ConstTensorView xv, yv;
    for (auto* v : {&xv, &yv}) {
      v->rank = 3;
      v->shape[0] = tokens;
      v->shape[1] = which == 0 ? 2 : 1;
      v->shape[2] = 16;
      v->stride[0] = stride;
      v->stride[1] = 16;
      v->stride[2] = 1;
    }
    xv.dtype = in.dtype;
    xv.data = static_cast<const char*>(in.data()) + (which == 0 ? 0 : 32) * SizeOf(in.dtype);
    yv.dtype = o;
    yv.data = static_cast<const char*>(normed.data()) + (which == 0 ? 0 : 32) * SizeOf(o);
    const auto stats = test::CompareWithOracle(xv, which == 0 ? qgv : kgv, yv, opt,
                                               test::UlpLimit(o));
    if (stats.over_limit > 0) *failure = "QkNorm oracle: " + stats.first_failure;
  }
  // v and the row padding are untouched; RoPE is the float32 rotation of
  // the stored normalised values, rounded once (qk_norm.h), or a copy.
  Buffer want = normed;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 48; i < stride; ++i) want.Set(t * stride + i, -7.0);
    if (!rope_on) continue;
    for (int64_t head = 0; head < 3; ++head) {
      const int64_t base = t * stride + head * 16;
      for (int64_t i = 0; i < half; ++i) {
        const float a = static_cast<float>(normed.Get(base + i));
        const float b = static_cast<float>(normed.Get(base + i + half));
        const float cs = static_cast<float>(cos.Get(t * half + i));
        const float sn = static_cast<float>(sin.Get(t * half + i));
        const float ac = a * cs, bs = b * sn, bc = b * cs, as = a * sn;
        want.Set(base + i, ac - bs);
        want.Set(base + i + half, bc + as);
      }
    }
  }
  if (failure->empty()) *failure = CompareExact(out, want);
  Bytes bytes;
  Append(&bytes, out);
  return bytes;
}

const Op kOps[] = {
    {"RmsNorm", {"x", "gamma"}, false, RunRmsNorm},
    {"AddRmsNorm", {"residual", "delta", "gamma"}, false, RunAddRmsNorm},
    {"QkNorm", {"qkv", "q_gamma", "k_gamma", "qkv+rope", "q_gamma+rope", "cos", "sin"}, false,
     RunQkNorm},
    {"RmsNormQuant", {"x", "gamma"}, true, RunRmsNormQuant},
    {"AddRmsNormQuant", {"residual", "delta", "gamma"}, true, RunAddRmsNormQuant},
};

struct QuantMode {
  DType q;
  bool dynamic;
  float scale;
};
const QuantMode kQuantModes[] = {
    {DType::kI8, true, 1.0f},   {DType::kF8E4M3, true, 1.0f},
    {DType::kI8, false, 1.0f},  {DType::kF8E4M3, false, 1.0f},
    {DType::kF8E4M3, false, 1e-3f},  // pushes y into saturation
};

class SpecialValues : public ::testing::TestWithParam<int> {};

// Runs every case of one op on every target; compares targets bitwise and
// each target with the reference.
TEST_P(SpecialValues, SameBitsOnEveryTargetAndAsReference) {
  const Op& op = kOps[GetParam()];
  const uint64_t seed = test::Seed();
  std::vector<Case> cases;
  for (const Combo& combo : Combos()) {
    for (const std::string& input : op.inputs) {
      for (const Special& s : kSpecials) {
        for (Place place : {Place::kLanes, Place::kWholeRow}) {
          const bool table = input.find("gamma") != std::string::npos || input == "cos" ||
                             input == "sin";
          if (table && place == Place::kWholeRow) continue;  // one placement for 1-D inputs
          Case c{combo, input, s.value, place, seed + cases.size()};
          if (!op.quantised) {
            cases.push_back(c);
            continue;
          }
          for (const QuantMode& m : kQuantModes) {
            c.q = m.q;
            c.dynamic = m.dynamic;
            c.scale = m.scale;
            cases.push_back(c);
          }
        }
      }
    }
  }
  std::map<size_t, Bytes> first;  // case index -> bytes of the first target
  std::map<size_t, std::string> first_target;
  int64_t mismatches = 0, wrong = 0;
  std::string targets;
  test::ForEachTarget([&](const char* target) {
    targets += std::string(" ") + target;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      std::string failure;
      const Bytes bytes = op.run(c, &failure);
      std::string special;
      for (const Special& s : kSpecials) {
        if (std::memcmp(&s.value, &c.special, 4) == 0) special = s.name;
      }
      const std::string what = std::string(op.name) + " " + target + " " + ComboName(c.combo) +
                               " " + c.input + "=" + special +
                               (c.place == Place::kWholeRow ? " (whole row)" : " (3 lanes)") +
                               (op.quantised ? std::string(" q=") + std::string(Name(c.q)) +
                                                   (c.dynamic ? " dynamic" : " static")
                                             : "");
      if (!failure.empty() && wrong++ < 10) ADD_FAILURE() << what << ": " << failure;
      auto it = first.find(i);
      if (it == first.end()) {
        first[i] = bytes;
        first_target[i] = target;
      } else if (it->second != bytes && mismatches++ < 10) {
        ADD_FAILURE() << what << ": output bits differ from target " << first_target[i];
      }
    }
  });
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(wrong, 0);
  std::printf("%s: %zu cases on each of%s\n", op.name, cases.size(), targets.c_str());
}

INSTANTIATE_TEST_SUITE_P(AllOps, SpecialValues,
                         ::testing::Range(0, static_cast<int>(std::size(kOps))),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(kOps[info.param].name);
                         });

// The comparisons above rest on test::CompareUlp: it must see what they
// need (NaN on one side, NaN signs, signed zeros), in every float dtype.
TEST(SpecialValuesComparison, SeesNaNSignsAndSignedZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(Name(t));
    Buffer got(t, 6), want(t, 6);
    const float g[6] = {1.0f, nan, -nan, 0.0f, nan, 2.0f};
    const float w[6] = {1.0f, nan, nan, -0.0f, 3.0f, 2.0f};
    for (int i = 0; i < 6; ++i) got.Set(i, g[i]), want.Set(i, w[i]);
    const test::UlpStats s = Compare(got, want);
    EXPECT_EQ(s.identical, 5);       // all but NaN/3 are 0 ulp apart
    EXPECT_EQ(s.nan_mismatches, 2);  // -NaN/NaN, NaN/3
    EXPECT_EQ(s.first_nan_mismatch, 2);
    EXPECT_EQ(s.bit_mismatches, 3);  // -NaN/NaN, +0/-0, NaN/3
    EXPECT_EQ(s.first_bit_mismatch, 2);
    EXPECT_EQ(s.max_ulp, reference::kNaNUlpDistance);
    EXPECT_EQ(CompareExact(got, got), "");
    EXPECT_NE(CompareExact(got, want), "");
    EXPECT_NE(CompareNaNs(got, want), "");
  }
}

// The examples of the fault report: x f32 [[1, 2, NaN, 4..8], [1, 2, +inf,
// 4..8]], gamma ones, e4m3 with a static scale 1.
TEST(SpecialValuesExample, NaNAndInfRowsGiveTheDocumentedE4M3Codes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1, 2, nan, 4, 5, 6, 7, 8, 1, 2, kInf, 4, 5, 6, 7, 8};
  const std::vector<float> g(8, 1.0f);
  test::ForEachTarget([&](const char* target) {
    std::vector<uint8_t> q(16, 0xAA);
    QuantOptions qo;
    qo.scaling = QuantScaling::kStatic;
    qo.scale = 1.0f;
    RmsNormQuant(Contiguous<const void*>(x.data(), DType::kF32, {2, 8}),
                 Contiguous<const void*>(g.data(), DType::kF32, {8}),
                 Contiguous<void*>(q.data(), DType::kF8E4M3, {2, 8}), qo);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(q[i], 0x7F) << target << " row 0 lane " << i;
    // Row 1: r = 1/sqrt(inf) = 0, so inf * 0 = NaN (x86's default NaN is
    // negative) and every finite lane is +0.
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(q[8 + i], i == 2 ? 0xFF : 0x00) << target << " row 1 lane " << i;
    }
  });
}

// ---------------------------------------------------------------- several NaNs

// docs/SPEC.md §10: a row holding NaNs of different bits gives every output
// element the row's NaN (of its values' NaNs, quieted, the largest bit
// pattern read as an unsigned integer), whatever gamma holds; where
// AddRmsNorm's delta is NaN, the sum is delta's NaN (whatever the residual
// holds); in a row without NaN, a NaN h (inf * 0) wins over a NaN gamma. Before
// this rule, which NaN survived depended on GCC's operand order.

// Quiet NaNs in dtype t: kSmall is positive with a low payload bit, kNeg is
// negative, kBig is positive with the top payload bit (beats kSmall).
enum class NaNKind { kSmall, kNeg, kBig };
uint32_t NaNBits(DType t, NaNKind k) {
  switch (t) {
    case DType::kBF16: return k == NaNKind::kSmall ? 0x7FC1 : k == NaNKind::kNeg ? 0xFFC0 : 0x7FE0;
    case DType::kF16: return k == NaNKind::kSmall ? 0x7E01 : k == NaNKind::kNeg ? 0xFE00 : 0x7F00;
    default:
      return k == NaNKind::kSmall ? 0x7FC00001u : k == NaNKind::kNeg ? 0xFFC00000u : 0x7FE00000u;
  }
}
void SetBits(Buffer& b, size_t i, uint32_t bits) {
  std::memcpy(static_cast<uint8_t*>(b.data()) + i * SizeOf(b.dtype), &bits, SizeOf(b.dtype));
}
uint32_t GetBits(const Buffer& b, size_t i) {
  uint32_t bits = 0;
  std::memcpy(&bits, static_cast<const uint8_t*>(b.data()) + i * SizeOf(b.dtype),
              SizeOf(b.dtype));
  return bits;
}

// (the other NaN, the winner) pairs; each is tried in both orders in a row.
struct NaNPair {
  NaNKind loser, winner;
};
constexpr NaNPair kNaNPairs[] = {{NaNKind::kSmall, NaNKind::kNeg},
                                 {NaNKind::kSmall, NaNKind::kBig}};

TEST(SeveralNaNs, EveryTargetGivesTheRowNaN) {
  // 5 rows (gamma is widened once per call from 4 rows), 37 wide: whole and
  // partial vectors on every target; the NaNs sit in different vectors.
  constexpr int64_t kR = 5, kW = 37;
  int64_t checked = 0;
  test::ForEachTarget([&](const char* target) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (Rounding rounding : {Rounding::kCastThenScale, Rounding::kSingle}) {
        for (const NaNPair& p : kNaNPairs) {
          for (bool swap : {false, true}) {
            SCOPED_TRACE(std::string(target) + " " + std::string(Name(t)) +
                         (rounding == Rounding::kSingle ? " single" : " cast-then-scale") +
                         (swap ? " swapped" : ""));
            const uint32_t lo = NaNBits(t, p.loser), hi = NaNBits(t, p.winner);
            const uint32_t first = swap ? hi : lo, second = swap ? lo : hi;
            Rng rng(7);
            Buffer x(t, kR * kW), g(t, kW), y(t, kR * kW);
            Fill(x, rng, 1.0);
            Fill(g, rng, 0.3, 1.0);
            SetBits(x, kW + 3, first);
            SetBits(x, kW + 20, second);
            SetBits(g, 10, NaNBits(t, NaNKind::kSmall));  // gamma's NaN does not enter row 1
            x.Set(3 * kW + 10, kInf);  // row 3: inf * 0 meets gamma's NaN: h's NaN wins
            NormOptions opt;
            opt.rounding = rounding;
            const auto xv = Contiguous<const void*>(x.data(), t, {kR, kW});
            const auto gv = Contiguous<const void*>(g.data(), t, {kW});
            RmsNorm(xv, gv, Contiguous<void*>(y.data(), t, {kR, kW}), opt);
            for (int64_t i = 0; i < kW; ++i) ASSERT_EQ(GetBits(y, kW + i), hi) << "y lane " << i;
            EXPECT_EQ(GetBits(y, 3 * kW + 10), NaNBits(t, NaNKind::kNeg))
                << "inf * 0 against a NaN gamma";

            // AddRmsNorm: lane 3 holds NaNs in both inputs (delta's wins),
            // lane 20 one in delta, lane 30 one in the residual; the row's
            // NaN is the larger.
            Buffer res(t, kR * kW), delta(t, kR * kW), y2(t, kR * kW);
            Fill(res, rng, 1.0);
            Fill(delta, rng, 0.5);
            SetBits(res, kW + 3, first);
            SetBits(delta, kW + 3, second);
            SetBits(delta, kW + 20, second);
            SetBits(res, kW + 30, first);
            AddNormOptions aopt;
            aopt.rounding = rounding;
            for (bool rounded : {true, false}) {
              aopt.normalize_rounded_sum = rounded;
              Buffer r = res;
              AddRmsNorm(Contiguous<void*>(r.data(), t, {kR, kW}),
                         Contiguous<const void*>(delta.data(), t, {kR, kW}), gv,
                         Contiguous<void*>(y2.data(), t, {kR, kW}), aopt);
              EXPECT_EQ(GetBits(r, kW + 3), second) << "residual, rounded " << rounded;
              EXPECT_EQ(GetBits(r, kW + 20), second) << "residual, rounded " << rounded;
              EXPECT_EQ(GetBits(r, kW + 30), first) << "residual, rounded " << rounded;
              for (int64_t i = 0; i < kW; ++i) {
                ASSERT_EQ(GetBits(y2, kW + i), hi) << "add y lane " << i << ", rounded " << rounded;
              }
            }

            // Quantised: e4m3 keeps the NaN's sign (0x7F or 0xFF); a row of
            // NaN has no finite value, so its dynamic scale is 1.
            std::vector<uint8_t> q(kR * kW, 0xAA);
            std::vector<float> scales(kR, -1.0f);
            QuantOptions qo;
            qo.scaling = QuantScaling::kDynamicPerToken;
            qo.scales = Contiguous<void*>(scales.data(), DType::kF32, {kR});
            RmsNormQuant(xv, gv, Contiguous<void*>(q.data(), DType::kF8E4M3, {kR, kW}), qo, opt);
            const uint8_t code = p.winner == NaNKind::kNeg ? 0xFF : 0x7F;
            for (int64_t i = 0; i < kW; ++i) ASSERT_EQ(q[kW + i], code) << "quant lane " << i;
            EXPECT_EQ(scales[1], 1.0f);

            // QkNorm, with and without RoPE (NaN in a cos entry too): head 1
            // of token 1 holds both NaNs.
            const QkHeads h{2, 1, 1, 16};
            const int64_t width = 64;
            Buffer in(t, kR * width), out(t, kR * width);
            Fill(in, rng, 1.0);
            SetBits(in, width + 16 + 2, first);
            SetBits(in, width + 16 + 9, second);
            Buffer qg(t, 16), kg(t, 16);
            Fill(qg, rng, 0.3, 1.0);
            Fill(kg, rng, 0.3, 1.0);
            std::vector<float> cs(kR * 5, 0.6f), sn(kR * 5, 0.8f);
            cs[5 + 2] = std::numeric_limits<float>::quiet_NaN();
            for (bool rope_on : {false, true}) {
              Rope rope;
              if (rope_on) {
                rope.rotary_dim = 10;
                rope.cos = Contiguous<const void*>(cs.data(), DType::kF32, {kR, 5});
                rope.sin = Contiguous<const void*>(sn.data(), DType::kF32, {kR, 5});
              }
              QkNorm(Contiguous<const void*>(in.data(), t, {kR, width}),
                     Contiguous<void*>(out.data(), t, {kR, width}), h,
                     Contiguous<const void*>(qg.data(), t, {16}),
                     Contiguous<const void*>(kg.data(), t, {16}), opt, rope);
              for (int64_t i = 0; i < 16; ++i) {
                ASSERT_EQ(GetBits(out, width + 16 + i), hi) << "qk lane " << i << " rope " << rope_on;
              }
            }
            ++checked;
          }
        }
      }
    }
  });
  std::printf("SeveralNaNs: %lld cases\n", static_cast<long long>(checked));
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace glmnorm
