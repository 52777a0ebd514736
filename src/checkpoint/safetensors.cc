// The safetensors reader: header validation and zero-copy tensor access.
#include "glmnorm/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "checkpoint/json_util.h"
#include "checkpoint/mapped_file.h"
#include "glmnorm/error.h"

namespace glmnorm {
namespace {

using nlohmann::json;

// The format's own limit (the reference reader refuses larger headers); it
// also bounds the JSON work a hostile file can cause.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr size_t kLengthBytes = 8;
constexpr size_t kMaxRankInFile = 32;

struct DTypeBits {
  std::string_view name;
  int bits;
};
// Every dtype name of the safetensors format (safetensors 0.5+).
constexpr DTypeBits kDTypes[] = {
    {"BOOL", 8},    {"U8", 8},   {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"I16", 16},
    {"U16", 16},    {"F16", 16}, {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32},    {"F64", 64}, {"I64", 64},    {"U64", 64},    {"C64", 64},
};

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
  return std::nullopt;
}

std::string_view SafetensorsName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
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
  if (header_len > after_len) {
    throw Error(where + ": header length " + std::to_string(header_len) + " is larger than the " +
                std::to_string(after_len) +
                " bytes that follow it (truncated or not a safetensors file)");
  }
  if (header_len > kMaxHeaderBytes) {
    throw Error(where + ": header length " + std::to_string(header_len) +
                " exceeds the format's limit of 100 MiB");
  }
  const char* text = reinterpret_cast<const char*>(image.data() + kLengthBytes);
  if (header_len == 0 || text[0] != '{') {
    throw Error(where + ": header is not a JSON object (it must start with '{')");
  }
  const json header = checkpoint::ParseStrictJson(std::string_view(text, header_len),
                                                  where + ": header", /*max_depth=*/4);
  if (!header.is_object()) throw Error(where + ": header is not a JSON object");

  const uint64_t data_size = after_len - header_len;
  data_ = image.data() + kLengthBytes + header_len;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) throw Error(where + ": __metadata__ is not a JSON object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          throw Error(where + ": __metadata__ value of \"" + key + "\" is not a string");
        }
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = where + ": tensor \"" + name + "\"";
    if (!info.is_object()) throw Error(what + " is not a JSON object");
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
      throw Error(what + ": shape has " + std::to_string(shape.size()) + " dimensions");
    }
    uint64_t elements = 1;
    bool overflow = false;
    for (const json& dim : shape) {
      const uint64_t d = checkpoint::GetUnsigned(dim, what, "each shape dimension");
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      overflow |= __builtin_mul_overflow(elements, d, &elements);
      t.shape.push_back(static_cast<int64_t>(d));
    }
    if (!overflow)
      overflow = __builtin_mul_overflow(elements, static_cast<uint64_t>(bits), &elements);
    if (overflow) {
      throw Error(what + ": shape " + checkpoint::Excerpt(shape) +
                  " has more elements than fit in 64 bits");
    }
    const uint64_t total_bits = elements;
    if (total_bits % 8 != 0) {
      throw Error(what + ": shape " + ShapeString(t.shape) + " of " + t.dtype +
                  " is not a whole number of bytes");
    }

    const json& offsets = info["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) {
      throw Error(what + ": data_offsets must be [begin, end], got " +
                  checkpoint::Excerpt(offsets));
    }
    t.begin = checkpoint::GetUnsigned(offsets[0], what, "data_offsets begin");
    t.end = checkpoint::GetUnsigned(offsets[1], what, "data_offsets end");
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
