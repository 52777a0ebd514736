// RowLayout (core/job.h): the merged leading dims give every row the address
// of the row-major decomposition over the view's own shape and strides.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "core/job.h"
#include "glmnorm/tensor.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

int64_t NaiveOffset(const ConstTensorView& v, int64_t row) {
  int64_t off = 0;
  for (int i = v.rank - 2; i >= 0; --i) {
    off += (row % v.shape[i]) * v.stride[i];
    row /= v.shape[i];
  }
  return off;
}

TEST(RowLayout, MergedDimsGiveTheSameRowOffsets) {
  test::Seed();
  std::mt19937_64 rng(test::Rng()());
  std::uniform_int_distribution<int> rank_of(1, 4), size_of(1, 5), kind_of(0, 3);
  for (int trial = 0; trial < 5000; ++trial) {
    ConstTensorView v;
    v.data = nullptr;
    v.dtype = DType::kF32;
    v.rank = rank_of(rng);
    int64_t contiguous = 1;
    for (int i = v.rank - 1; i >= 0; --i) {
      v.shape[i] = i == v.rank - 1 ? size_of(rng) + 2 : size_of(rng);
      // Contiguous, padded, broadcast (stride 0) or transposed-looking.
      const int kind = kind_of(rng);
      v.stride[i] = i == v.rank - 1 ? 1
                    : kind == 0     ? contiguous
                    : kind == 1     ? contiguous + 3
                    : kind == 2     ? 0
                                    : 7;
      contiguous = v.stride[i] * v.shape[i] + (kind == 1 ? 1 : 0);
      if (contiguous == 0) contiguous = v.shape[i];
    }
    const RowLayout l = RowLayout::Of(v);
    ASSERT_LE(l.num_lead, v.rank - 1);
    int64_t rows = 1;
    for (int i = 0; i < v.rank - 1; ++i) rows *= v.shape[i];
    std::string shape;
    for (int i = 0; i < v.rank; ++i) {
      shape += std::to_string(v.shape[i]) + "/" + std::to_string(v.stride[i]) + " ";
    }
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(l.Offset(r), NaiveOffset(v, r)) << "shape/stride " << shape << "row " << r;
    }
  }
}

TEST(RowLayout, ContiguousHeadsNeedNoDivision) {
  ConstTensorView v;
  v.rank = 3;
  v.dtype = DType::kBF16;
  v.shape[0] = 1, v.shape[1] = 104, v.shape[2] = 128;
  v.stride[0] = 104 * 128, v.stride[1] = 128, v.stride[2] = 1;
  EXPECT_EQ(RowLayout::Of(v).num_lead, 1);
  v.shape[0] = 4096;  // tokens x heads, contiguous: one dim of rows
  EXPECT_EQ(RowLayout::Of(v).num_lead, 1);
  v.stride[0] = 112 * 128;  // heads of a fused QKV row: stays two dims
  EXPECT_EQ(RowLayout::Of(v).num_lead, 2);
}

}  // namespace
}  // namespace glmnorm
