// Empty tensors: for every op and every pointer or view argument, zero
// elements with a null pointer is a no-op (an empty PyTorch tensor has a null
// data pointer), and a null pointer with elements is an error naming the
// argument. Shapes whose element count overflows 64 bits are errors, unless a
// dim is 0 (then the tensor is empty, however large the other dims).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "glmnorm/glmnorm.h"
#include "glmnorm/quant.h"

namespace glmnorm {
namespace {

using ::testing::HasSubstr;

// The arguments of every op, with `rows` rows of `width` (null data when the
// view is empty), gammas of `width`, RoPE tables of `positions` rows.
struct Args {
  Args(int64_t rows, int64_t width, int64_t positions = 0)
      : rows(rows), width(width), positions(positions) {
    const auto n = static_cast<size_t>(rows * width);
    a.assign(n, 1.0f), b.assign(n, 1.0f), c.assign(n, 1.0f), q.assign(n, 0);
    g.assign(static_cast<size_t>(width), 1.0f);
    cos.assign(static_cast<size_t>(positions * 4), 1.0f);
    sin.assign(static_cast<size_t>(positions * 4), 0.0f);
    scales.assign(static_cast<size_t>(rows), 0.0f);
  }
  int64_t rows, width, positions;
  std::vector<float> a, b, c, g, cos, sin, scales;
  std::vector<uint8_t> q;
  // Data pointers, null when the vector is empty (as for an empty tensor).
  static float* Ptr(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
  TensorView A() { return Contiguous<void*>(Ptr(a), DType::kF32, {rows, width}); }
  TensorView B() { return Contiguous<void*>(Ptr(b), DType::kF32, {rows, width}); }
  TensorView C() { return Contiguous<void*>(Ptr(c), DType::kF32, {rows, width}); }
  TensorView Q() {
    return Contiguous<void*>(q.empty() ? nullptr : q.data(), DType::kI8, {rows, width});
  }
  ConstTensorView G() { return Contiguous<const void*>(Ptr(g), DType::kF32, {width}); }
  QuantOptions Dynamic() {
    QuantOptions o;
    o.scaling = QuantScaling::kDynamicPerToken;
    o.scales = Contiguous<void*>(Ptr(scales), DType::kF32, {rows});
    return o;
  }
};

// Every op on the same arguments; QkNorm treats the width as 1 q head.
const std::vector<std::pair<std::string, std::function<void(Args&)>>>& Ops() {
  static const std::vector<std::pair<std::string, std::function<void(Args&)>>> ops = {
      {"RmsNorm", [](Args& s) { RmsNorm(AsConst(s.A()), s.G(), s.B()); }},
      {"AddRmsNorm", [](Args& s) { AddRmsNorm(s.A(), AsConst(s.B()), s.G(), s.C()); }},
      {"RmsNormQuant",
       [](Args& s) { RmsNormQuant(AsConst(s.A()), s.G(), s.Q(), s.Dynamic()); }},
      {"AddRmsNormQuant",
       [](Args& s) { AddRmsNormQuant(s.A(), AsConst(s.B()), s.G(), s.Q(), s.Dynamic()); }},
      {"QkNorm",
       [](Args& s) {
         Rope rope;
         rope.rotary_dim = 8;
         rope.cos = Contiguous<const void*>(Args::Ptr(s.cos), DType::kF32, {s.positions, 4});
         rope.sin = Contiguous<const void*>(Args::Ptr(s.sin), DType::kF32, {s.positions, 4});
         QkNorm(AsConst(s.A()), s.B(), QkHeads{1, 0, 0, static_cast<int>(s.width)}, s.G(), s.G(),
                {}, rope);
       }},
  };
  return ops;
}

TEST(EmptyTensors, ZeroRowsWithNullPointersIsANoOpForEveryOp) {
  for (const auto& [name, run] : Ops()) {
    Args s(0, 16);  // every activation, q, scales and table pointer is null
    EXPECT_NO_THROW(run(s)) << name;
  }
}

TEST(EmptyTensors, HugeDimsNextToAZeroDimAreEmptyNotOverflow) {
  std::vector<float> g(8, 1.0f);
  for (int zero_at : {0, 1, 2}) {
    TensorView x;
    x.rank = 4;
    for (int i = 0; i < 3; ++i) x.shape[i] = i == zero_at ? 0 : int64_t{1} << 62;
    x.shape[3] = 8;
    x.stride[3] = 1;
    x.stride[2] = 8;
    x.stride[1] = x.stride[0] = int64_t{1} << 62;
    const auto gv = Contiguous<const void*>(g.data(), DType::kF32, {8});
    EXPECT_NO_THROW(RmsNorm(AsConst(x), gv, x)) << "zero at dim " << zero_at;
    TensorView y = x;
    y.data = reinterpret_cast<void*>(uintptr_t{1} << 40);  // never touched
    EXPECT_NO_THROW(AddRmsNorm(x, AsConst(y), gv, y)) << "zero at dim " << zero_at;
    TensorView q = x;
    q.dtype = DType::kI8;
    QuantOptions qo;  // dynamic, null scales: nothing to write
    EXPECT_NO_THROW(RmsNormQuant(AsConst(x), gv, q, qo)) << "zero at dim " << zero_at;
    EXPECT_NO_THROW(AddRmsNormQuant(x, AsConst(y), gv, q, qo)) << "zero at dim " << zero_at;
  }
}

TEST(EmptyTensors, ZeroWidthIsANoOp) {
  for (const auto& [name, run] : Ops()) {
    if (name == "QkNorm") continue;  // head_dim >= 1 is a model parameter, not a tensor
    Args s(4, 0);                     // rows but no elements; gamma of length 0, null
    s.a.clear(), s.b.clear(), s.c.clear(), s.q.clear();
    const std::vector<float> scales_before = s.scales;
    EXPECT_NO_THROW(run(s)) << name;
    EXPECT_EQ(s.scales, scales_before) << name << " wrote scales of an empty tensor";
  }
}

// Null with elements: an error that names the argument, for each argument.
TEST(EmptyTensors, NullPointerWithElementsNamesTheArgument) {
  struct NullCase {
    std::string op, arg;
    std::function<void(Args&)> clear;
  };
  const std::vector<NullCase> cases = {
      {"RmsNorm", "x.data is null", [](Args& s) { s.a.clear(); }},
      {"RmsNorm", "y.data is null", [](Args& s) { s.b.clear(); }},
      {"RmsNorm", "gamma.data is null", [](Args& s) { s.g.clear(); }},
      {"AddRmsNorm", "residual.data is null", [](Args& s) { s.a.clear(); }},
      {"AddRmsNorm", "delta.data is null", [](Args& s) { s.b.clear(); }},
      {"AddRmsNorm", "y.data is null", [](Args& s) { s.c.clear(); }},
      {"AddRmsNorm", "gamma.data is null", [](Args& s) { s.g.clear(); }},
      {"RmsNormQuant", "x.data is null", [](Args& s) { s.a.clear(); }},
      {"RmsNormQuant", "q.data is null", [](Args& s) { s.q.clear(); }},
      {"RmsNormQuant", "scales must not be null", [](Args& s) { s.scales.clear(); }},
      {"AddRmsNormQuant", "residual.data is null", [](Args& s) { s.a.clear(); }},
      {"AddRmsNormQuant", "delta.data is null", [](Args& s) { s.b.clear(); }},
      {"AddRmsNormQuant", "q.data is null", [](Args& s) { s.q.clear(); }},
      {"AddRmsNormQuant", "scales must not be null", [](Args& s) { s.scales.clear(); }},
      {"QkNorm", "qkv_in.data is null", [](Args& s) { s.a.clear(); }},
      {"QkNorm", "qkv_out.data is null", [](Args& s) { s.b.clear(); }},
      {"QkNorm", "q_gamma.data is null", [](Args& s) { s.g.clear(); }},
      {"QkNorm", "rope.cos.data is null", [](Args& s) { s.cos.clear(); }},
      {"QkNorm", "rope.sin.data is null", [](Args& s) { s.sin.clear(); }},
  };
  for (const NullCase& c : cases) {
    for (const auto& [name, run] : Ops()) {
      if (name != c.op) continue;
      Args s(2, 8, 4);
      c.clear(s);
      try {
        run(s);
        ADD_FAILURE() << c.op << ": no error for " << c.arg;
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr(c.op + ": ")) << c.arg;
        EXPECT_THAT(e.what(), HasSubstr(c.arg));
      }
    }
  }
}

// Zero tokens need no RoPE positions: an empty table with a null pointer is
// fine, a table too short for the tokens is not.
TEST(EmptyTensors, QkNormRopeTableWithNoPositions) {
  Args empty(0, 8, 0);
  EXPECT_NO_THROW(Ops().back().second(empty));
  Args tokens(2, 8, 0);
  try {
    Ops().back().second(tokens);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rope.cos has 0 positions but there are 2 tokens"));
  }
}

}  // namespace
}  // namespace glmnorm
