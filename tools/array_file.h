// The arrays `glmnorm apply` reads and writes: .npy files, or .safetensors
// files holding one tensor ("x" in, "y" out). Chosen by file extension.
#ifndef GLMNORM_CHECKPOINT_ARRAY_FILE_H_
#define GLMNORM_CHECKPOINT_ARRAY_FILE_H_

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glmnorm/dtype.h"
#include "glmnorm/tensor.h"

namespace glmnorm::checkpoint {

enum class ArrayFormat { kNpy, kSafetensors };

// By extension: ".npy" or ".safetensors". Throws glmnorm::Error naming
// `path` and the accepted extensions otherwise.
ArrayFormat FormatOf(const std::string& path);

// A bf16, f16 or f32 array in memory, C order.
struct HostArray {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;  // operator new storage: aligned for any element
};

// Reads `path`: an .npy file ('<f4', '<f2', '<u2' = bf16 bits), or tensor
// `tensor_name` of a .safetensors file (BF16, F16, F32). Throws
// glmnorm::Error "<path>: ..." when it cannot.
HostArray ReadArray(const std::string& path, std::string_view tensor_name);

// The bytes of `array` in the format of `path`'s extension; a .safetensors
// file gets the tensor name `tensor_name` and `metadata`.
std::vector<std::byte> EncodeArray(const std::string& path, std::string_view tensor_name,
                                   const HostArray& array,
                                   const std::map<std::string, std::string>& metadata = {});

}  // namespace glmnorm::checkpoint

#endif  // GLMNORM_CHECKPOINT_ARRAY_FILE_H_
