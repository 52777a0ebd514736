// The safetensors reader: header validation and zero-copy tensor access.
#include "glmnorm/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "io/json_util.h"
#include "io/mapped_file.h"
#include "glmnorm/error.h"

namespace glmnorm {
namespace {

using nlohmann::json;

// The reference reader's limit (MAX_HEADER_SIZE = 100_000_000 in
// safetensors/src/tensor.rs, decimal, not 100 MiB); it also bounds the JSON
// work a hostile file can cause.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kLengthBytes = 8;
// Stricter than the reference (docs/CHECKPOINTS.md): NumPy's limit, so no
// framework could load a tensor of higher rank anyway.
constexpr size_t kMaxRankInFile = 64;
// Stricter than the reference's 128: a valid header nests 3 levels
// (header, tensor, shape); the rest is room for unknown tensor fields.
constexpr int kMaxHeaderDepth = 4;

struct DTypeBits {
  std::string_view name;
  int bits;
};
// Every dtype name of the safetensors format (the Dtype enum of
// safetensors 0.8, tensor.rs).
constexpr DTypeBits kDTypes[] = {
    {"BOOL", 8},    {"U8", 8},          {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"F4", 4},      {"F6_E2M3", 6},
    {"F6_E3M2", 6}, {"I16", 16},        {"U16", 16},        {"F16", 16},    {"BF16", 16},
    {"I32", 32},    {"U32", 32},        {"F32", 32},        {"F64", 64},    {"I64", 64},
    {"U64", 64},    {"C64", 64},
};

// A size or offset as the reference reads it: a Rust usize through
// serde_json, i.e. a JSON integer without a minus sign. serde_json reads
// "-0" as a float and refuses it; nlohmann reads it as a signed 0, the only
// non-negative value it does not mark unsigned, so it is refused here too.
uint64_t ReadSize(const json& value, const std::string& what, std::string_view field) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  const bool minus_zero = value.is_number_integer() && value.get<int64_t>() == 0;
  throw Error(what + ": " + std::string(field) + " must be a non-negative integer, got " +
              (minus_zero ? std::string("-0") : checkpoint::Excerpt(value)));
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint64_t ReadLe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

}  // namespace

int SafetensorsDTypeBits(std::string_view name) {
  for (const DTypeBits& d : kDTypes) {
    if (d.name == name) return d.bits;
  }
  return 0;
}

std::optional<DType> DTypeFromSafetensors(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "I8") return DType::kI8;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "I64") return DType::kI64;
  return std::nullopt;
}

std::string_view SafetensorsName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kI64:
      return "I64";
    case DType::kF16:
      return "F16";
    case DType::kI8:
      return "I8";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

struct SafetensorsFile::Mapping {
  checkpoint::MappedFile file;
};

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile file;
  file.label_ = path;
  file.mapping_ = std::make_unique<Mapping>();
  file.mapping_->file = checkpoint::MappedFile::Open(path);
  file.ParseHeader(file.mapping_->file.bytes());
  return file;
}

SafetensorsFile SafetensorsFile::Parse(std::span<const std::byte> image, const std::string& label) {
  SafetensorsFile file;
  file.label_ = label;
  file.ParseHeader(image);
  return file;
}

void SafetensorsFile::ParseHeader(std::span<const std::byte> image) {
  const std::string& where = label_;
  if (image.size() < kLengthBytes) {
    throw Error(where + ": file is " + std::to_string(image.size()) +
                " bytes, too short for a safetensors file (8-byte header length, then the "
                "JSON header)");
  }
  const uint64_t header_len = ReadLe64(image.data());
  const uint64_t after_len = image.size() - kLengthBytes;
  // The limit first, as the reference checks it.
  if (header_len > kMaxHeaderBytes) {
    throw Error(where + ": header length " + std::to_string(header_len) +
                " exceeds the format's limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_len > after_len) {
    throw Error(where + ": header length " + std::to_string(header_len) + " is larger than the " +
                std::to_string(after_len) +
                " bytes that follow it (truncated or not a safetensors file)");
  }
  const char* text = reinterpret_cast<const char*>(image.data() + kLengthBytes);
  // The format's specification: the header MUST begin with '{'. (The
  // reference implementation also skips leading whitespace; a documented
  // stricter check.)
  if (header_len == 0 || text[0] != '{') {
    throw Error(where + ": header is not a JSON object (it must start with '{')");
  }
  // nlohmann-json stops at a NUL byte as if the text ended there, so
  // "{}\0garbage" would parse; for serde_json (the reference) a raw NUL is
  // never valid JSON. The format pads with spaces, not NULs.
  if (const void* nul = std::memchr(text, 0, header_len)) {
    throw Error(where + ": header byte " + std::to_string(static_cast<const char*>(nul) - text) +
                " is NUL, which is not valid JSON (the header may be padded with spaces only)");
  }
  const json header = checkpoint::ParseStrictJson(std::string_view(text, header_len),
                                                  where + ": header", kMaxHeaderDepth);
  if (!header.is_object()) throw Error(where + ": header is not a JSON object");

  const uint64_t data_size = after_len - header_len;
  data_ = image.data() + kLengthBytes + header_len;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      // The reference reads it as Option<HashMap<String, String>>: null is
      // the same as no metadata (Python's safe_open(...).metadata() is None).
      if (info.is_null()) continue;
      if (!info.is_object()) {
        throw Error(where + ": __metadata__ must be a JSON object of strings or null, got " +
                    checkpoint::Excerpt(info));
      }
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          throw Error(where + ": __metadata__ value of \"" + key + "\" is not a string, got " +
                      checkpoint::Excerpt(value));
        }
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = where + ": tensor \"" + name + "\"";
    if (!info.is_object()) {
      throw Error(what + " is not a JSON object with dtype, shape and data_offsets, got " +
                  checkpoint::Excerpt(info));
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!info.contains(key)) throw Error(what + " has no \"" + key + "\"");
    }
    SafetensorsTensor t;
    t.name = name;
    const json& dtype = info["dtype"];
    if (!dtype.is_string()) throw Error(what + ": dtype is not a string");
    t.dtype = dtype.get<std::string>();
    const int bits = SafetensorsDTypeBits(t.dtype);
    if (bits == 0) {
      throw Error(what + ": unknown dtype \"" + t.dtype +
                  "\" (not a safetensors dtype such as BF16, F16, F32, I64, U8, F8_E4M3)");
    }

    const json& shape = info["shape"];
    if (!shape.is_array()) throw Error(what + ": shape is not a JSON array");
    if (shape.size() > kMaxRankInFile) {
      throw Error(what + ": shape has " + std::to_string(shape.size()) + " dimensions; at most " +
                  std::to_string(kMaxRankInFile) + " are supported");
    }
    // Elements times bits, multiplied in the reference's order: an overflow
    // anywhere refuses the file, even when a later dimension is 0.
    uint64_t total_bits = 1;
    bool overflow = false;
    bool above_int64 = false;
    for (const json& dim : shape) {
      const uint64_t d = ReadSize(dim, what, "each shape dimension");
      overflow = overflow || __builtin_mul_overflow(total_bits, d, &total_bits);
      above_int64 = above_int64 || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      t.shape.push_back(static_cast<int64_t>(d));  // meaningful unless above_int64
    }
    overflow =
        overflow || __builtin_mul_overflow(total_bits, static_cast<uint64_t>(bits), &total_bits);
    if (overflow) {
      throw Error(what + ": shape " + checkpoint::Excerpt(shape) + " of " + t.dtype +
                  " is too large (its size in bits overflows 64 bits)");
    }
    // Only a zero-size tensor gets here with such a dimension. Shapes are
    // int64 (as in PyTorch and NumPy, which cannot make this tensor either).
    if (above_int64) {
      throw Error(what + ": shape " + checkpoint::Excerpt(shape) + " has a dimension above 2^63-1");
    }
    if (total_bits % 8 != 0) {
      throw Error(what + ": shape " + ShapeString(t.shape) + " of " + t.dtype +
                  " is not a whole number of bytes");
    }

    const json& offsets = info["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) {
      throw Error(what + ": data_offsets must be [begin, end], got " +
                  checkpoint::Excerpt(offsets));
    }
    t.begin = ReadSize(offsets[0], what, "data_offsets begin");
    t.end = ReadSize(offsets[1], what, "data_offsets end");
    if (t.begin > t.end || t.end > data_size) {
      throw Error(what + ": data_offsets [" + std::to_string(t.begin) + ", " +
                  std::to_string(t.end) + "] outside the data section of " +
                  std::to_string(data_size) + " bytes");
    }
    if (total_bits / 8 != t.size()) {
      throw Error(what + ": shape " + ShapeString(t.shape) + " of " + t.dtype + " is " +
                  std::to_string(total_bits / 8) + " bytes but data_offsets span " +
                  std::to_string(t.size()) + " bytes");
    }
    tensors_.push_back(std::move(t));
  }

  // The byte ranges must tile the data section exactly: an overlap means two
  // tensors share bytes, a hole hides data no tensor owns (the reference
  // reader refuses both).
  std::vector<const SafetensorsTensor*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const SafetensorsTensor& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor* t : by_offset) {
    if (t->begin < covered) {
      throw Error(where + ": tensors \"" + previous->name + "\" and \"" + t->name +
                  "\" overlap (bytes " + std::to_string(t->begin) + " to " +
                  std::to_string(std::min(covered, t->end)) + ")");
    }
    if (t->begin > covered) {
      throw Error(where + ": " + std::to_string(t->begin - covered) + " bytes before tensor \"" +
                  t->name + "\" belong to no tensor");
    }
    covered = t->end;
    previous = t;
  }
  if (covered != data_size) {
    throw Error(where + ": " + std::to_string(data_size - covered) +
                " bytes at the end of the data section belong to no tensor");
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it =
      std::lower_bound(tensors_.begin(), tensors_.end(), name,
                       [](const SafetensorsTensor& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::span<const std::byte> SafetensorsFile::Bytes(const SafetensorsTensor& tensor) const {
  return {data_ + tensor.begin, static_cast<size_t>(tensor.size())};
}

ConstTensorView SafetensorsFile::View(const SafetensorsTensor& tensor,
                                      std::vector<std::byte>* unaligned_copy) const {
  const std::string what = label_ + ": tensor \"" + tensor.name + "\"";
  const std::optional<DType> dtype = DTypeFromSafetensors(tensor.dtype);
  if (!dtype) {
    throw Error(what + " has dtype " + tensor.dtype + "; expected BF16, F16, F32, I8 or F8_E4M3");
  }
  if (tensor.shape.size() > static_cast<size_t>(kMaxRank)) {
    throw Error(what + " has rank " + std::to_string(tensor.shape.size()) + "; at most " +
                std::to_string(kMaxRank) + " is supported");
  }
  // A zero-size tensor may have huge other dimensions; the strides and row
  // counts of a view multiply them, so their product must fit in int64.
  int64_t nonzero_product = 1;
  for (int64_t d : tensor.shape) {
    if (d != 0 && __builtin_mul_overflow(nonzero_product, d, &nonzero_product)) {
      throw Error(what + " has shape " + ShapeString(tensor.shape) +
                  ", too large to view (its non-zero dimensions multiply past 2^63-1)");
    }
  }
  std::span<const std::byte> bytes = Bytes(tensor);
  const void* data = bytes.data();
  if (reinterpret_cast<uintptr_t>(data) % SizeOf(*dtype) != 0) {
    if (unaligned_copy == nullptr) {
      throw Error(what + " is not aligned to its " + std::to_string(SizeOf(*dtype)) +
                  "-byte elements");
    }
    // std::vector<std::byte> storage comes from operator new: aligned for any scalar.
    unaligned_copy->assign(bytes.begin(), bytes.end());
    data = unaligned_copy->data();
  }
  ConstTensorView v;
  v.data = data;
  v.dtype = *dtype;
  v.rank = tensor.shape.empty() ? 1 : static_cast<int>(tensor.shape.size());
  for (int i = 0; i < v.rank; ++i) v.shape[i] = tensor.shape.empty() ? 1 : tensor.shape[i];
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.stride[i] = stride;
    stride *= v.shape[i];
  }
  return v;
}

}  // namespace glmnorm
