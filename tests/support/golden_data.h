// Loader of the golden conformance data (tests/data/golden, written by
// scripts/make_golden.py from Transformers' Glm4MoeRMSNorm) and the raw bits
// the golden tests compare (with test::CompareUlp, support/test_support.h).
//
// Format: one safetensors file per case, <case name>.safetensors, read with
// glmnorm::SafetensorsFile. Its tensors are the case's arrays (BF16 or F32);
// its "__metadata__" holds the case's fields (name, kind, eps, rows/width or
// batch/seq/tokens/heads) and the generator's record (format, seed, versions,
// module). Metadata values are strings: string fields as they are, all others
// JSON-encoded (the generator refuses a string field that reads as JSON).
#ifndef GLMNORM_TESTS_GOLDEN_GOLDEN_DATA_H_
#define GLMNORM_TESTS_GOLDEN_GOLDEN_DATA_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "glmnorm/dtype.h"
#include "glmnorm/tensor.h"
#include "support/test_support.h"

namespace glmnorm::golden {

// One array of a case (a copy of its tensor): little-endian bf16 bits or float32.
struct Array {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t NumElements() const;
  // Element i as float (bf16 widened exactly).
  float At(int64_t i) const;
  // Element i's raw bits (16 bits for bf16, 32 for f32).
  uint32_t BitsAt(int64_t i) const;
};

struct Case {
  std::string name;
  std::string kind;  // "rms_norm", "add_rms_norm" or "qk_norm"
  double eps = 0.0;
  nlohmann::json meta;  // the file's whole metadata, decoded (DecodeMetadata)
  std::map<std::string, Array> arrays;

  // The named array; throws std::runtime_error when the case has none.
  const Array& Get(const std::string& array_name) const;
  bool Has(const std::string& array_name) const { return arrays.count(array_name) != 0; }
};

// Directory of the case files (GLMNORM_GOLDEN_DIR, set by CMake).
std::string GoldenDir();
// GoldenDir()/<name>.safetensors
std::string CasePath(const std::string& name);
// Names of all cases (the *.safetensors files of GoldenDir()), sorted.
std::vector<std::string> AllCaseNames();
// Names of the cases of one kind, sorted.
std::vector<std::string> CaseNames(const std::string& kind);
// A case file's metadata as one JSON object: each value that parses as JSON
// is replaced by the parsed value, the others stay strings.
nlohmann::json DecodeMetadata(const std::map<std::string, std::string>& metadata);
// Reads a case and copies its arrays out of the file (SafetensorsFile checks
// every tensor's size against its shape); checks that the metadata names the
// case and gives its kind and a numeric eps. Throws std::runtime_error (or
// glmnorm::Error) on any inconsistency.
Case LoadCase(const std::string& name);
// Safetensors dtype name: "BF16" -> kBF16, "F32" -> kF32; throws on anything else.
DType ParseDType(const std::string& name);

// Contiguous views of a whole array (its own shape).
ConstTensorView View(const Array& a);
TensorView MutableView(Array& a);

// All elements' raw bits of an array.
std::vector<uint32_t> AllBits(const Array& a);

// Raw bits of the element at a flat index of a buffer of `dtype`.
uint32_t BitsAt(DType dtype, const void* data, int64_t i);

// Raw bits of columns [col_begin, col_end) of `rows` rows that lie
// `row_stride` elements apart, row by row.
std::vector<uint32_t> ColumnBits(DType dtype, const void* data, int64_t rows, int64_t row_stride,
                                 int64_t col_begin, int64_t col_end);

// The bf16 value next to `bits` towards +inf (direction > 0) or -inf.
uint16_t NextBf16(uint16_t bits, int direction);

// Prints "[golden] label: summary" to stdout, so the figures are visible.
void Print(const std::string& label, const test::UlpStats& stats);

}  // namespace glmnorm::golden

#endif  // GLMNORM_TESTS_GOLDEN_GOLDEN_DATA_H_
