// Reading and writing safetensors files (https://github.com/huggingface/safetensors).
//
// Layout: 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {str: str} or null (optional),
//    NAME: {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...}
// then the data section; offsets are relative to it. A file is accepted
// exactly when the reference reader (PyPI safetensors) accepts it, apart from
// a few documented stricter checks (docs/CHECKPOINTS.md; duplicate keys,
// leading whitespace, more than 64 dimensions, ...), and
// tests/checkpoint/safetensors_parity.py holds the two readers to that. Every
// size and offset is checked with overflow-safe arithmetic, shape x element
// size must equal the byte range, tensors must not overlap and must cover
// the data section with no holes. Tensors of every dtype of the format are
// accepted (View needs one of glmnorm's). Any violation throws glmnorm::Error
// with one line naming the file and the fault; nothing ever reads outside the
// file.
//
// SafetensorsFile::Open maps the file read-only (zero-copy): tensor bytes are
// views into the mapping, and only the pages actually touched are read.
#ifndef GLMNORM_SAFETENSORS_H_
#define GLMNORM_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glmnorm/dtype.h"
#include "glmnorm/tensor.h"

namespace glmnorm {

// Bits per element of a safetensors dtype name ("BF16" -> 16, "F4" -> 4,
// "BOOL" -> 8, ...); 0 for a name the format does not define.
int SafetensorsDTypeBits(std::string_view name);
// The glmnorm DType of a safetensors dtype name ("BF16", "F16", "F32", "I8",
// "F8_E4M3"), or nullopt for the others.
std::optional<DType> DTypeFromSafetensors(std::string_view name);
// The safetensors name of a DType ("BF16", ...).
std::string_view SafetensorsName(DType dtype);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as in the header: "BF16", "F32", "I64", ...
  std::vector<int64_t> shape;  // may be empty (a scalar)
  uint64_t begin = 0;          // byte range in the data section
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates its header. Throws glmnorm::Error
  // "<path>: <what is wrong>".
  static SafetensorsFile Open(const std::string& path);
  // Validates an in-memory image that the caller keeps alive as long as the
  // returned object (fuzzing, tests). `label` names it in error messages.
  static SafetensorsFile Parse(std::span<const std::byte> image, const std::string& label);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return label_; }
  // Sorted by name.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;  // nullptr if absent
  // Empty when __metadata__ is absent, null or {}.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes, a view into the file (zero-copy).
  std::span<const std::byte> Bytes(const SafetensorsTensor& tensor) const;

  // A contiguous TensorView of a tensor of a glmnorm DType and rank 0..4
  // (rank 0 is viewed as rank 1 of length 1). The format does not align
  // tensor data; when the bytes are not aligned to the element size they are
  // copied into `*unaligned_copy` and the view points there (or, with no
  // buffer given, this throws). Throws for other dtypes or ranks, and for a
  // zero-size tensor whose non-zero dimensions multiply past 2^63-1.
  ConstTensorView View(const SafetensorsTensor& tensor,
                       std::vector<std::byte>* unaligned_copy = nullptr) const;

 private:
  struct Mapping;
  SafetensorsFile() = default;
  void ParseHeader(std::span<const std::byte> image);

  std::string label_;
  std::unique_ptr<Mapping> mapping_;  // null for Parse()d images
  const std::byte* data_ = nullptr;   // start of the data section
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `bytes` holds exactly shape-product x element-size
// bytes of `dtype` (a safetensors dtype name), row-major.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

// The bytes of a safetensors file holding `entries` (in name order, data
// aligned to 8 bytes as the reference writer does) and `metadata`. Throws
// glmnorm::Error on a size mismatch, unknown dtype or duplicate name.
std::vector<std::byte> EncodeSafetensors(std::span<const SafetensorsEntry> entries,
                                         const std::map<std::string, std::string>& metadata = {});

}  // namespace glmnorm

#endif  // GLMNORM_SAFETENSORS_H_
