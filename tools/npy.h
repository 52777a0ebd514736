// NumPy .npy files for the CLI's inputs and outputs.
//
// Supported element types: '<f4' (f32), '<f2' (f16) and '<u2', which holds
// RAW BF16 BITS: NumPy has no bfloat16, so bf16 arrays travel as uint16 (in
// Python: `torch_tensor.view(torch.int16).numpy().view('<u2')`, and back with
// `torch.from_numpy(a.view('<i2')).view(torch.bfloat16)`). C order only.
#ifndef GLMNORM_CHECKPOINT_NPY_H_
#define GLMNORM_CHECKPOINT_NPY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "glmnorm/dtype.h"

namespace glmnorm::checkpoint {

struct NpyArray {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // () is a scalar: empty
  size_t data_offset = 0;      // from the start of the file
  size_t data_bytes = 0;
};

// Validates an .npy image (format versions 1.0, 2.0 and 3.0). Throws
// glmnorm::Error "<label>: ..." for anything else: bad magic, truncated
// header, a header that is not the expected dict, an unsupported dtype,
// fortran_order True, or a data size that does not match the shape.
NpyArray ParseNpy(std::span<const std::byte> image, const std::string& label);

// The bytes of a version 1.0 .npy file; bf16 is written as '<u2'. `data`
// must hold product(shape) elements. Throws for other dtypes.
std::vector<std::byte> EncodeNpy(DType dtype, std::span<const int64_t> shape,
                                 std::span<const std::byte> data);

}  // namespace glmnorm::checkpoint

#endif  // GLMNORM_CHECKPOINT_NPY_H_
