#include "array_file.h"

#include "io/mapped_file.h"
#include "npy.h"
#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"

namespace glmnorm::checkpoint {
namespace {

// Both formats allow a zero-size array whose other dimensions are huge
// ([0, 2^62, 2^62]); apply multiplies the leading dimensions into a row
// count, so the non-zero ones must multiply within int64 (NumPy's own rule).
void CheckShapeFits(const std::string& path, const std::vector<int64_t>& shape) {
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d != 0 && __builtin_mul_overflow(product, d, &product)) {
      std::string dims;
      for (int64_t x : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(x);
      throw Error(path + ": shape [" + dims +
                  "] is too large (its non-zero dimensions multiply past 2^63-1)");
    }
  }
}

}  // namespace

ArrayFormat FormatOf(const std::string& path) {
  const std::string_view p = path;
  if (p.ends_with(".npy")) return ArrayFormat::kNpy;
  if (p.ends_with(".safetensors")) return ArrayFormat::kSafetensors;
  throw Error(path + ": unknown file type; expected a .npy or .safetensors file");
}

HostArray ReadArray(const std::string& path, std::string_view tensor_name) {
  const ArrayFormat format = FormatOf(path);
  HostArray out;
  if (format == ArrayFormat::kNpy) {
    const MappedFile file = MappedFile::Open(path);
    const NpyArray npy = ParseNpy(file.bytes(), path);
    out.dtype = npy.dtype;
    out.shape = npy.shape;
    const auto data = file.bytes().subspan(npy.data_offset, npy.data_bytes);
    out.data.assign(data.begin(), data.end());
    CheckShapeFits(path, out.shape);
    return out;
  }
  const SafetensorsFile file = SafetensorsFile::Open(path);
  const SafetensorsTensor* t = file.Find(tensor_name);
  if (t == nullptr) {
    std::string names;
    for (const SafetensorsTensor& other : file.tensors()) {
      names += (names.empty() ? "" : ", ") + other.name;
      if (names.size() > 80) {
        names += ", ...";
        break;
      }
    }
    throw Error(path + ": no tensor \"" + std::string(tensor_name) +
                "\" (it has: " + (names.empty() ? "none" : names) + ")");
  }
  const std::optional<DType> dtype = DTypeFromSafetensors(t->dtype);
  if (!dtype || !IsFloatActivation(*dtype)) {
    throw Error(path + ": tensor \"" + t->name + "\" has dtype " + t->dtype +
                "; expected BF16, F16 or F32");
  }
  out.dtype = *dtype;
  out.shape = t->shape;
  const auto data = file.Bytes(*t);
  out.data.assign(data.begin(), data.end());
  CheckShapeFits(path, out.shape);
  return out;
}

std::vector<std::byte> EncodeArray(const std::string& path, std::string_view tensor_name,
                                   const HostArray& array,
                                   const std::map<std::string, std::string>& metadata) {
  if (FormatOf(path) == ArrayFormat::kNpy) return EncodeNpy(array.dtype, array.shape, array.data);
  const SafetensorsEntry entry{std::string(tensor_name), std::string(SafetensorsName(array.dtype)),
                               array.shape, array.data};
  return EncodeSafetensors(std::span(&entry, 1), metadata);
}

}  // namespace glmnorm::checkpoint
