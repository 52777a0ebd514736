// Non-owning views of strided tensors with up to 4 dims.
//
// Strides are in ELEMENTS and >= 0. The last dim must be contiguous (stride 1); the
// leading dims and their strides are free, so a column slice of a larger
// buffer (q and k inside a fused QKV buffer) is a view, not a copy.
#ifndef GLMNORM_TENSOR_H_
#define GLMNORM_TENSOR_H_

#include <cstdint>
#include <initializer_list>

#include "glmnorm/dtype.h"

namespace glmnorm {

constexpr int kMaxRank = 4;

template <typename Ptr>
struct BasicTensorView {
  Ptr data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  int64_t stride[kMaxRank] = {0, 0, 0, 0};  // elements

  int64_t width() const { return rank > 0 ? shape[rank - 1] : 0; }
  // Number of rows = product of the leading dims (1 for rank 1).
  int64_t rows() const {
    int64_t n = 1;
    for (int i = 0; i + 1 < rank; ++i) n *= shape[i];
    return n;
  }
};

using TensorView = BasicTensorView<void*>;
using ConstTensorView = BasicTensorView<const void*>;

inline ConstTensorView AsConst(const TensorView& v) {
  ConstTensorView c;
  c.data = v.data;
  c.dtype = v.dtype;
  c.rank = v.rank;
  for (int i = 0; i < kMaxRank; ++i) {
    c.shape[i] = v.shape[i];
    c.stride[i] = v.stride[i];
  }
  return c;
}

// A contiguous (row-major) view of `data` with the given shape.
template <typename Ptr>
BasicTensorView<Ptr> Contiguous(Ptr data, DType dtype, std::initializer_list<int64_t> shape) {
  BasicTensorView<Ptr> v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) {
    if (i < kMaxRank) v.shape[i] = s;
    ++i;
  }
  int64_t st = 1;
  for (int d = (v.rank < kMaxRank ? v.rank : kMaxRank) - 1; d >= 0; --d) {
    v.stride[d] = st;
    st *= v.shape[d];
  }
  return v;
}

// A 2-D view of `rows` rows of `width` elements, `row_stride` elements apart.
template <typename Ptr>
BasicTensorView<Ptr> Rows(Ptr data, DType dtype, int64_t rows, int64_t width,
                          int64_t row_stride) {
  BasicTensorView<Ptr> v;
  v.data = data;
  v.dtype = dtype;
  v.rank = 2;
  v.shape[0] = rows;
  v.shape[1] = width;
  v.stride[0] = row_stride;
  v.stride[1] = 1;
  return v;
}

}  // namespace glmnorm

#endif  // GLMNORM_TENSOR_H_
