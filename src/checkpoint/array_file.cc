#include "checkpoint/array_file.h"

#include "checkpoint/mapped_file.h"
#include "checkpoint/npy.h"
#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"

namespace glmnorm::checkpoint {

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
