#include "support/golden_data.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "glmnorm/safetensors.h"

#ifndef GLMNORM_GOLDEN_DIR
#error "GLMNORM_GOLDEN_DIR must be defined (tests/CMakeLists.txt)"
#endif

namespace glmnorm::golden {
namespace {

static_assert(std::endian::native == std::endian::little, "the golden tensors are little-endian");

constexpr const char* kExtension = ".safetensors";

}  // namespace

int64_t Array::NumElements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

uint32_t BitsAt(DType dtype, const void* data, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (dtype == DType::kF32) {
    uint32_t u;
    std::memcpy(&u, p + 4 * i, 4);
    return u;
  }
  uint16_t u;
  std::memcpy(&u, p + 2 * i, 2);
  return u;
}

uint32_t Array::BitsAt(int64_t i) const { return golden::BitsAt(dtype, bytes.data(), i); }

float Array::At(int64_t i) const {
  const uint32_t bits = BitsAt(i);
  return dtype == DType::kF32 ? FloatOf(bits) : F32FromBF16(static_cast<uint16_t>(bits));
}

const Array& Case::Get(const std::string& array_name) const {
  auto it = arrays.find(array_name);
  if (it == arrays.end()) {
    throw std::runtime_error("golden: case " + name + " has no array '" + array_name + "'");
  }
  return it->second;
}

std::string GoldenDir() { return GLMNORM_GOLDEN_DIR; }

std::string CasePath(const std::string& name) { return GoldenDir() + "/" + name + kExtension; }

std::vector<std::string> AllCaseNames() {
  std::vector<std::string> names;
  for (const auto& f : std::filesystem::directory_iterator(GoldenDir())) {
    if (f.is_regular_file() && f.path().extension() == kExtension) {
      names.push_back(f.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> CaseNames(const std::string& kind) {
  std::vector<std::string> names;
  for (const std::string& name : AllCaseNames()) {
    const SafetensorsFile file = SafetensorsFile::Open(CasePath(name));
    const auto it = file.metadata().find("kind");
    if (it != file.metadata().end() && it->second == kind) names.push_back(name);
  }
  return names;
}

nlohmann::json DecodeMetadata(const std::map<std::string, std::string>& metadata) {
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [key, value] : metadata) {
    nlohmann::json parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    meta[key] = parsed.is_discarded() ? nlohmann::json(value) : std::move(parsed);
  }
  return meta;
}

DType ParseDType(const std::string& name) {
  if (name == "BF16") return DType::kBF16;
  if (name == "F32") return DType::kF32;
  throw std::runtime_error("golden: unexpected dtype '" + name + "'");
}

Case LoadCase(const std::string& name) {
  const std::string path = CasePath(name);
  const SafetensorsFile file = SafetensorsFile::Open(path);
  Case c;
  c.name = name;
  c.meta = DecodeMetadata(file.metadata());
  if (!c.meta.contains("name") || c.meta["name"] != name) {
    throw std::runtime_error("golden: " + path + ": metadata does not name the case " + name);
  }
  if (!c.meta.contains("kind") || !c.meta["kind"].is_string()) {
    throw std::runtime_error("golden: " + path + ": metadata has no kind");
  }
  if (!c.meta.contains("eps") || !c.meta["eps"].is_number()) {
    throw std::runtime_error("golden: " + path + ": metadata has no numeric eps");
  }
  c.kind = c.meta["kind"].get<std::string>();
  c.eps = c.meta["eps"].get<double>();
  for (const SafetensorsTensor& t : file.tensors()) {
    Array array;
    array.dtype = ParseDType(t.dtype);
    array.shape = t.shape;
    const std::span<const std::byte> bytes = file.Bytes(t);
    const auto expected = static_cast<size_t>(array.NumElements()) * SizeOf(array.dtype);
    if (bytes.size() != expected) {  // SafetensorsFile checks this already
      throw std::runtime_error("golden: " + path + ": " + t.name + " has " +
                               std::to_string(bytes.size()) + " bytes, expected " +
                               std::to_string(expected));
    }
    array.bytes.resize(bytes.size());
    if (!bytes.empty()) std::memcpy(array.bytes.data(), bytes.data(), bytes.size());
    c.arrays.emplace(t.name, std::move(array));
  }
  return c;
}

ConstTensorView View(const Array& a) {
  ConstTensorView v;
  v.data = a.bytes.data();
  v.dtype = a.dtype;
  v.rank = static_cast<int>(a.shape.size());
  if (v.rank > kMaxRank) throw std::runtime_error("golden: array of rank > kMaxRank");
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = a.shape[d];
    v.stride[d] = stride;
    stride *= a.shape[d];
  }
  return v;
}

TensorView MutableView(Array& a) {
  const ConstTensorView c = View(a);
  TensorView v;
  v.data = a.bytes.data();
  v.dtype = c.dtype;
  v.rank = c.rank;
  for (int d = 0; d < kMaxRank; ++d) {
    v.shape[d] = c.shape[d];
    v.stride[d] = c.stride[d];
  }
  return v;
}

std::vector<uint32_t> AllBits(const Array& a) {
  std::vector<uint32_t> bits(static_cast<size_t>(a.NumElements()));
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = a.BitsAt(static_cast<int64_t>(i));
  return bits;
}

std::vector<uint32_t> ColumnBits(DType dtype, const void* data, int64_t rows, int64_t row_stride,
                                 int64_t col_begin, int64_t col_end) {
  std::vector<uint32_t> bits;
  bits.reserve(static_cast<size_t>(rows * (col_end - col_begin)));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = col_begin; j < col_end; ++j) {
      bits.push_back(BitsAt(dtype, data, r * row_stride + j));
    }
  }
  return bits;
}

uint16_t NextBf16(uint16_t bits, int direction) {
  // bf16 bits ordered like their values (negatives mirrored below zero).
  const int64_t magnitude = bits & 0x7FFF;
  const int64_t key = ((bits & 0x8000) ? -magnitude : magnitude) + (direction > 0 ? 1 : -1);
  return static_cast<uint16_t>(key < 0 ? (0x8000 | -key) : key);
}

void Print(const std::string& label, const test::UlpStats& stats) {
  std::cout << "[golden] " << label << ": " << stats.Summary() << std::endl;
}

}  // namespace glmnorm::golden
