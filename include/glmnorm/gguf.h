// Reading GGUF files (llama.cpp's format; ggml/docs/gguf.md), versions 2
// and 3, little-endian.
//
// Layout: magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, then
// kv_count key/value pairs (string key, u32 value type, value), then
// tensor_count tensor infos (string name, u32 n_dims, n_dims x u64 ne, u32
// ggml type, u64 offset), padding to `general.alignment` (default 32), and
// the data section; tensor offsets are relative to it. Strings are a u64
// length and that many bytes.
//
// The reader is strict: every count, length, offset and size is checked
// against the bytes that remain before it is used, with overflow-safe
// arithmetic, so a header claiming 2^62 tensors or a 2^40-byte string is
// refused without allocating. Tensor infos must satisfy ggml's loader
// (gguf.cpp): at most 4 dimensions, a known type, rows a whole number of
// blocks, offsets packed in order at the alignment; every tensor must lie
// inside the file. docs/CHECKPOINTS.md lists where this is stricter than the
// `gguf` Python package, and tests/checkpoint/gguf_parity.py holds the two
// readers to that. Any violation throws glmnorm::Error with one line naming
// the file and the fault.
//
// GgufFile::Open maps the file read-only: tensor bytes are views into the
// mapping (zero-copy), and only the pages actually touched are read.
#ifndef GLMNORM_GGUF_H_
#define GLMNORM_GGUF_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glmnorm/tensor.h"

namespace glmnorm {

// GGUF metadata value types (gguf_type).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "UINT8", ..., "FLOAT64" (gguf-py's GGUFValueType names).
std::string_view GgufValueTypeName(GgufValueType type);

struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType element_type = GgufValueType::kUint8;  // arrays only
  uint64_t count = 1;    // arrays: number of elements
  uint64_t bits = 0;     // scalars: the little-endian bits, zero-extended
  std::string string;    // kString
  std::span<const std::byte> body;  // arrays: the elements as stored

  // The value of an integer scalar (any width or signedness) when it is
  // non-negative; nullopt for other types.
  std::optional<uint64_t> AsUint() const;
  // The value of a FLOAT32 or FLOAT64 scalar; nullopt for other types.
  std::optional<double> AsFloat() const;
};

// ggml tensor types: the name ("F32", "BF16", "Q4_K", ...), block size in
// elements and bytes per block, from ggml (gguf-py's GGML_QUANT_SIZES); the
// test holds this table to the package. Unknown or retired ids: nullopt.
struct GgmlTypeInfo {
  std::string_view name;
  uint32_t block_size;
  uint32_t type_size;
};
std::optional<GgmlTypeInfo> GgmlType(uint32_t type);
constexpr uint32_t kGgmlF32 = 0;
constexpr uint32_t kGgmlF16 = 1;
constexpr uint32_t kGgmlBF16 = 30;

struct GgufTensor {
  std::string name;
  uint32_t type = 0;          // ggml type id
  std::vector<int64_t> dims;  // ggml order: dims[0] is the fastest-varying (row width)
  uint64_t offset = 0;        // in the data section
  uint64_t size = 0;          // bytes
  // The dims in row-major (PyTorch, safetensors) order: dims reversed.
  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
};

class GgufFile {
 public:
  // Maps `path` read-only and validates it. Throws glmnorm::Error
  // "<path>: <what is wrong>".
  static GgufFile Open(const std::string& path);
  // Validates an in-memory image that the caller keeps alive as long as the
  // returned object (fuzzing, tests). `label` names it in error messages.
  static GgufFile Parse(std::span<const std::byte> image, const std::string& label);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const { return label_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // in the file
  // In file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* FindKey(std::string_view key) const;  // nullptr if absent
  // In file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* Find(std::string_view name) const;  // nullptr if absent

  // The tensor's bytes, a view into the file (zero-copy).
  std::span<const std::byte> Bytes(const GgufTensor& tensor) const;
  // A 1-D..4-D TensorView of an F32, F16 or BF16 tensor (row-major shape).
  // When the bytes are not aligned to the element size (possible only with
  // general.alignment 1 or 2) they are copied into `*unaligned_copy`; with
  // no buffer given, that throws. Throws for other types.
  ConstTensorView View(const GgufTensor& tensor,
                       std::vector<std::byte>* unaligned_copy = nullptr) const;

 private:
  struct Mapping;
  GgufFile() = default;
  void ParseImage(std::span<const std::byte> image);

  std::string label_;
  std::unique_ptr<Mapping> mapping_;  // null for Parse()d images
  std::span<const std::byte> image_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// A GGUF checkpoint: one file, or a split set NAME-00001-of-0000N.gguf ...
// NAME-0000N-of-0000N.gguf (llama.cpp's gguf-split; split.no, split.count,
// split.tensors.count) read as one. Open takes the single file or the first
// file of the set, opens every file of the set, and checks that each says
// it is part K of N of the same set, that the tensor count adds up, and
// that no tensor name occurs twice. Metadata are the first file's.
class GgufCheckpoint {
 public:
  static GgufCheckpoint Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<GgufFile>& files() const { return files_; }
  const GgufFile& first() const { return files_.front(); }
  const GgufValue* FindKey(std::string_view key) const { return first().FindKey(key); }
  // The tensor and the file holding it; {nullptr, nullptr} when absent.
  std::pair<const GgufTensor*, const GgufFile*> Find(std::string_view name) const;
  // Every tensor name of every file, sorted.
  std::vector<std::string> TensorNames() const;

 private:
  std::string path_;
  std::vector<GgufFile> files_;
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> where_;  // file, tensor
};

// Whether `path` names a GGUF file by its extension (".gguf").
bool IsGgufPath(std::string_view path);

// llama.cpp's glm4moe tensor name of a Transformers norm name
// ("model.layers.3.input_layernorm.weight" -> "blk.3.attn_norm.weight",
// "model.norm.weight" -> "output_norm.weight", the MTP layer's enorm ->
// "blk.N.nextn.enorm.weight", ...), and back; nullopt for names that are
// not norms. The table is gguf-py's TENSOR_NAMES for MODEL_ARCH.GLM4_MOE.
std::optional<std::string> GgufNormName(std::string_view transformers_name);
std::optional<std::string> TransformersNormName(std::string_view gguf_name);

}  // namespace glmnorm

#endif  // GLMNORM_GGUF_H_
