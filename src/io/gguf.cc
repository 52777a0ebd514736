// The GGUF reader (include/glmnorm/gguf.h). Every read goes through Cursor,
// which checks the bytes that remain before it touches them.
#include "glmnorm/gguf.h"

#include <bit>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <set>

#include "glmnorm/error.h"
#include "io/mapped_file.h"

namespace glmnorm {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;            // GGML_MAX_DIMS
constexpr size_t kMaxTensorName = 63;  // GGML_MAX_NAME - 1
constexpr uint64_t kInt64Max = static_cast<uint64_t>(INT64_MAX);
// Bounds on the entries a file may declare, so that the memory the reader
// takes is bounded whatever the file's size (GLM-4.5 has ~1,800 tensors and
// ~50 keys; arrays, such as the vocabulary, are one key and never copied).
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
constexpr uint64_t kMaxKeys = uint64_t{1} << 16;

// ggml's types by id (ggml.h; gguf-py GGML_QUANT_SIZES). Gaps are retired ids.
struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},          {1, {"F16", 1, 2}},          {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},       {6, {"Q5_0", 32, 22}},       {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},       {9, {"Q8_1", 32, 40}},       {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},    {12, {"Q4_K", 256, 144}},    {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},    {15, {"Q8_K", 256, 292}},    {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},   {18, {"IQ3_XXS", 256, 98}},  {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},    {21, {"IQ3_S", 256, 110}},   {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}},  {24, {"I8", 1, 1}},          {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},         {27, {"I64", 1, 8}},         {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},    {30, {"BF16", 1, 2}},        {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},    {39, {"MXFP4", 32, 17}},     {40, {"NVFP4", 64, 36}},
    {41, {"Q1_0", 128, 18}},
};

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Whether `s` is valid UTF-8 (keys and tensor names are decoded by every
// reader; gguf-py refuses the file otherwise).
bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i - 1 < static_cast<size_t>(n)) return false;
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Bytes of a scalar value type; 0 for STRING and ARRAY; -1 for an unknown id.
int ScalarSize(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return -1;
}

class Cursor {
 public:
  Cursor(std::span<const std::byte> image, const std::string& label)
      : image_(image), label_(label) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return image_.size() - pos_; }

  [[noreturn]] void Fail(const std::string& what) const { throw Error(label_ + ": " + what); }

  void Need(uint64_t n, const std::string& what) const {
    if (n > remaining()) {
      Fail(what + " at byte " + std::to_string(pos_) + " needs " + std::to_string(n) +
           " bytes, but the file ends after " + std::to_string(remaining()) +
           " (truncated or corrupt)");
    }
  }
  uint64_t ReadUint(int size, const std::string& what) {
    Need(static_cast<uint64_t>(size), what);
    uint64_t v = 0;
    std::memcpy(&v, image_.data() + pos_, static_cast<size_t>(size));  // little-endian host
    pos_ += static_cast<uint64_t>(size);
    return v;
  }
  uint32_t U32(const std::string& what) { return static_cast<uint32_t>(ReadUint(4, what)); }
  uint64_t U64(const std::string& what) { return ReadUint(8, what); }
  std::span<const std::byte> Take(uint64_t n, const std::string& what) {
    Need(n, what);
    auto s = image_.subspan(static_cast<size_t>(pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  // A u64 length and that many bytes; the length is checked against the
  // bytes that remain before anything is allocated.
  std::string String(const std::string& what) {
    const uint64_t len = U64(what + " length");
    if (len > remaining()) {
      Fail(what + " claims " + std::to_string(len) + " bytes, but only " +
           std::to_string(remaining()) + " remain in the file");
    }
    auto s = Take(len, what);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }
  // Skips a string (array elements), checking it like String.
  void SkipString(const std::string& what) {
    const uint64_t len = U64(what + " length");
    if (len > remaining()) {
      Fail(what + " claims " + std::to_string(len) + " bytes, but only " +
           std::to_string(remaining()) + " remain in the file");
    }
    pos_ += len;
  }

 private:
  std::span<const std::byte> image_;
  const std::string& label_;
  uint64_t pos_ = 0;
};

std::string Quoted(std::string_view s) {
  // Names come from the file; keep control bytes from reaching a message.
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F || c == '"' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
    if (out.size() > 200) {
      out += "...";
      break;
    }
  }
  return out + "\"";
}

uint64_t AlignUp(uint64_t v, uint64_t alignment, bool* overflow) {
  const uint64_t rem = v % alignment;
  if (rem == 0) return v;
  uint64_t out;
  *overflow = __builtin_add_overflow(v, alignment - rem, &out);
  return out;
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "UINT8";
    case GgufValueType::kInt8: return "INT8";
    case GgufValueType::kUint16: return "UINT16";
    case GgufValueType::kInt16: return "INT16";
    case GgufValueType::kUint32: return "UINT32";
    case GgufValueType::kInt32: return "INT32";
    case GgufValueType::kFloat32: return "FLOAT32";
    case GgufValueType::kBool: return "BOOL";
    case GgufValueType::kString: return "STRING";
    case GgufValueType::kArray: return "ARRAY";
    case GgufValueType::kUint64: return "UINT64";
    case GgufValueType::kInt64: return "INT64";
    case GgufValueType::kFloat64: return "FLOAT64";
  }
  return "?";
}

std::optional<uint64_t> GgufValue::AsUint() const {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kUint16:
    case GgufValueType::kUint32:
    case GgufValueType::kUint64:
      return bits;
    case GgufValueType::kInt8:
      return static_cast<int8_t>(bits) < 0 ? std::nullopt : std::optional<uint64_t>(bits);
    case GgufValueType::kInt16:
      return static_cast<int16_t>(bits) < 0 ? std::nullopt : std::optional<uint64_t>(bits);
    case GgufValueType::kInt32:
      return static_cast<int32_t>(bits) < 0 ? std::nullopt : std::optional<uint64_t>(bits);
    case GgufValueType::kInt64:
      return static_cast<int64_t>(bits) < 0 ? std::nullopt : std::optional<uint64_t>(bits);
    default:
      return std::nullopt;
  }
}

std::optional<double> GgufValue::AsFloat() const {
  if (type == GgufValueType::kFloat32) return std::bit_cast<float>(static_cast<uint32_t>(bits));
  if (type == GgufValueType::kFloat64) return std::bit_cast<double>(bits);
  return std::nullopt;
}

std::optional<GgmlTypeInfo> GgmlType(uint32_t type) {
  for (const TypeRow& row : kTypes) {
    if (row.id == type) return row.info;
  }
  return std::nullopt;
}

struct GgufFile::Mapping {
  checkpoint::MappedFile file;
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::Open(const std::string& path) {
  GgufFile f;
  f.label_ = path;
  f.mapping_ = std::make_unique<Mapping>();
  f.mapping_->file = checkpoint::MappedFile::Open(path);
  f.ParseImage(f.mapping_->file.bytes());
  return f;
}

GgufFile GgufFile::Parse(std::span<const std::byte> image, const std::string& label) {
  GgufFile f;
  f.label_ = label;
  f.ParseImage(image);
  return f;
}

void GgufFile::ParseImage(std::span<const std::byte> image) {
  image_ = image;
  Cursor in(image, label_);
  if (image.size() < 4) {
    in.Fail("not a GGUF file: " + std::to_string(image.size()) +
            " bytes, too short for the magic \"GGUF\"");
  }
  const uint32_t magic = in.U32("magic");
  if (magic != kMagic) {
    in.Fail("not a GGUF file: bad magic " + Hex(magic) + ", expected \"GGUF\"");
  }
  version_ = in.U32("version");
  if (version_ != 2 && version_ != 3) {
    if (version_ != 0 && (version_ & 0xFFFF) == 0) {
      in.Fail("version field " + Hex(version_) +
              " looks big-endian; only little-endian GGUF files are supported");
    }
    in.Fail("GGUF version " + std::to_string(version_) + " is not supported (expected 2 or 3)");
  }
  const uint64_t tensor_count = in.U64("tensor_count");
  const uint64_t kv_count = in.U64("kv_count");
  // Smallest possible entries: a key/value is an empty key (8) + type (4) +
  // a 1-byte value; a tensor info is an empty name (8) + n_dims (4) + type
  // (4) + offset (8). Counts beyond what the file can hold are refused here,
  // before anything is reserved.
  if (kv_count > in.remaining() / 13) {
    in.Fail("header claims " + std::to_string(kv_count) + " metadata entries, but the file has " +
            "room for at most " + std::to_string(in.remaining() / 13));
  }
  if (tensor_count > in.remaining() / 24) {
    in.Fail("header claims " + std::to_string(tensor_count) + " tensors, but the file has room " +
            "for at most " + std::to_string(in.remaining() / 24));
  }

  if (kv_count > kMaxKeys) {
    in.Fail("header claims " + std::to_string(kv_count) + " metadata entries; glmnorm reads at " +
            "most " + std::to_string(kMaxKeys));
  }
  if (tensor_count > kMaxTensors) {
    in.Fail("header claims " + std::to_string(tensor_count) + " tensors; glmnorm reads at most " +
            std::to_string(kMaxTensors));
  }

  for (uint64_t k = 0; k < kv_count; ++k) {
    const std::string where = "metadata entry " + std::to_string(k);
    std::string key = in.String(where + " key");
    if (!ValidUtf8(key)) in.Fail(where + ": key " + Quoted(key) + " is not valid UTF-8");
    const std::string what = "metadata " + Quoted(key);
    if (key_index_.count(key)) in.Fail("duplicate metadata key " + Quoted(key));
    GgufValue v;
    const uint32_t type = in.U32(what + " type");
    if (ScalarSize(type) < 0) {
      in.Fail(what + " has unknown value type " + std::to_string(type) + " (expected 0..12)");
    }
    v.type = static_cast<GgufValueType>(type);
    if (v.type == GgufValueType::kString) {
      v.string = in.String(what);
    } else if (v.type == GgufValueType::kArray) {
      const uint32_t etype = in.U32(what + " array type");
      const int esize = ScalarSize(etype);
      if (esize < 0) {
        in.Fail(what + " is an array of unknown value type " + std::to_string(etype) +
                " (expected 0..12)");
      }
      if (static_cast<GgufValueType>(etype) == GgufValueType::kArray) {
        in.Fail(what + " is an array of arrays, which ggml's loader does not read");
      }
      v.element_type = static_cast<GgufValueType>(etype);
      v.count = in.U64(what + " array length");
      const uint64_t min_element = esize > 0 ? static_cast<uint64_t>(esize) : 8;
      if (v.count > in.remaining() / min_element) {
        in.Fail(what + " claims " + std::to_string(v.count) + " array elements, but only " +
                std::to_string(in.remaining()) + " bytes remain in the file");
      }
      const uint64_t start = in.pos();
      if (esize > 0) {
        in.Take(v.count * static_cast<uint64_t>(esize), what);
      } else {
        for (uint64_t i = 0; i < v.count; ++i) in.SkipString(what + " element " + std::to_string(i));
      }
      v.body = image.subspan(static_cast<size_t>(start), static_cast<size_t>(in.pos() - start));
    } else {
      v.bits = in.ReadUint(ScalarSize(type), what);
    }
    key_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(v));
  }

  for (uint64_t t = 0; t < tensor_count; ++t) {
    const std::string where = "tensor info " + std::to_string(t);
    GgufTensor ti;
    ti.name = in.String(where + " name");
    if (!ValidUtf8(ti.name)) in.Fail(where + ": name " + Quoted(ti.name) + " is not valid UTF-8");
    const std::string what = "tensor " + Quoted(ti.name);
    if (ti.name.size() > kMaxTensorName) {
      in.Fail(what + ": name is " + std::to_string(ti.name.size()) + " bytes; ggml allows at most " +
              std::to_string(kMaxTensorName));
    }
    if (tensor_index_.count(ti.name)) in.Fail("duplicate tensor name " + Quoted(ti.name));
    const uint32_t n_dims = in.U32(what + " n_dims");
    if (n_dims > static_cast<uint32_t>(kMaxDims)) {
      in.Fail(what + " has " + std::to_string(n_dims) + " dimensions; ggml allows at most " +
              std::to_string(kMaxDims));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = in.U64(what + " dimension");
      if (ne > kInt64Max) {
        in.Fail(what + " has dimension " + std::to_string(ne) + " above 2^63-1");
      }
      ti.dims.push_back(static_cast<int64_t>(ne));
    }
    ti.type = in.U32(what + " type");
    ti.offset = in.U64(what + " offset");
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }

  if (const GgufValue* a = FindKey("general.alignment")) {
    if (a->type != GgufValueType::kUint32) {
      in.Fail("general.alignment is " + std::string(GgufValueTypeName(a->type)) +
              ", expected UINT32");
    }
    if (a->bits == 0 || (a->bits & (a->bits - 1)) != 0) {
      in.Fail("general.alignment = " + std::to_string(a->bits) +
              " is not a non-zero power of two");
    }
    alignment_ = a->bits;
  } else {
    alignment_ = kDefaultAlignment;
  }
  bool overflow = false;
  data_offset_ = AlignUp(in.pos(), alignment_, &overflow);

  // Sizes, then ggml's layout rule: each tensor starts where the previous
  // one's padded bytes end, and everything lies inside the file.
  uint64_t expected_offset = 0;
  const uint64_t file_size = image.size();
  for (GgufTensor& ti : tensors_) {
    const std::string what = "tensor " + Quoted(ti.name);
    const std::optional<GgmlTypeInfo> type = GgmlType(ti.type);
    if (!type) in.Fail(what + " has unknown ggml type " + std::to_string(ti.type));
    uint64_t elements = 1;
    for (int64_t ne : ti.dims) {
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(ne), &elements) ||
          elements > kInt64Max) {
        in.Fail(what + ": its dimensions multiply past 2^63-1 elements");
      }
    }
    const uint64_t row = ti.dims.empty() ? 1 : static_cast<uint64_t>(ti.dims[0]);
    if (row % type->block_size != 0) {
      in.Fail(what + " of type " + std::string(type->name) + " has rows of " +
              std::to_string(row) + " elements, not a multiple of its block size " +
              std::to_string(type->block_size));
    }
    // elements / block_size <= 2^63 / 1, times type_size <= 292: check it.
    if (__builtin_mul_overflow(elements / type->block_size, uint64_t{type->type_size}, &ti.size)) {
      in.Fail(what + ": its size overflows 64 bits");
    }
    if (ti.offset != expected_offset) {
      in.Fail(what + " has offset " + std::to_string(ti.offset) + ", expected " +
              std::to_string(expected_offset) +
              " (ggml packs tensors in order, each padded to general.alignment = " +
              std::to_string(alignment_) + ")");
    }
    uint64_t begin, end;
    if (overflow || __builtin_add_overflow(data_offset_, ti.offset, &begin) ||
        __builtin_add_overflow(begin, ti.size, &end) || end > file_size) {
      in.Fail(what + " (" + std::to_string(ti.size) + " bytes at data offset " +
              std::to_string(ti.offset) + ") extends past the end of the file (" +
              std::to_string(file_size) + " bytes): truncated or corrupt");
    }
    bool pad_overflow = false;
    expected_offset = AlignUp(ti.offset + ti.size, alignment_, &pad_overflow);
    if (pad_overflow) in.Fail(what + ": its padded end overflows 64 bits");
  }
}

const GgufValue* GgufFile::FindKey(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::Find(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> GgufFile::Bytes(const GgufTensor& t) const {
  // ParseImage proved data_offset_ + offset + size <= the image size.
  return image_.subspan(static_cast<size_t>(data_offset_ + t.offset), static_cast<size_t>(t.size));
}

ConstTensorView GgufFile::View(const GgufTensor& t, std::vector<std::byte>* unaligned_copy) const {
  const std::string what = label_ + ": tensor " + Quoted(t.name);
  DType dtype;
  switch (t.type) {
    case kGgmlF32: dtype = DType::kF32; break;
    case kGgmlF16: dtype = DType::kF16; break;
    case kGgmlBF16: dtype = DType::kBF16; break;
    default:
      throw Error(what + " has type " +
                  std::string(GgmlType(t.type) ? GgmlType(t.type)->name : "?") +
                  "; expected F32, F16 or BF16");
  }
  std::span<const std::byte> bytes = Bytes(t);
  const void* data = bytes.data();
  if (reinterpret_cast<uintptr_t>(data) % SizeOf(dtype) != 0) {
    if (unaligned_copy == nullptr) {
      throw Error(what + " is not aligned to its " + std::to_string(SizeOf(dtype)) +
                  "-byte elements");
    }
    unaligned_copy->assign(bytes.begin(), bytes.end());
    data = unaligned_copy->data();
  }
  const std::vector<int64_t> shape = t.shape();
  ConstTensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = shape.empty() ? 1 : static_cast<int>(shape.size());
  for (int i = 0; i < v.rank; ++i) v.shape[i] = shape.empty() ? 1 : shape[i];
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.stride[i] = stride;
    stride *= v.shape[i];
  }
  return v;
}

// ---- Split sets ------------------------------------------------------------

namespace {

struct SplitName {
  std::string prefix;  // "dir/NAME"
  int part = 0;        // 1-based
  int count = 0;
};

// "PREFIX-%05d-of-%05d.gguf" (llama.cpp's llama_split_path).
std::optional<SplitName> ParseSplitName(std::string_view path) {
  constexpr std::string_view kExt = ".gguf";
  if (!path.ends_with(kExt) || path.size() < kExt.size() + 15) return std::nullopt;
  const std::string_view tail = path.substr(path.size() - kExt.size() - 15, 15);  // -00001-of-00003
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-") return std::nullopt;
  SplitName out;
  for (int i : {1, 10}) {
    int value = 0;
    const char* b = tail.data() + i;
    const auto [end, ec] = std::from_chars(b, b + 5, value);
    if (ec != std::errc() || end != b + 5) return std::nullopt;
    (i == 1 ? out.part : out.count) = value;
  }
  out.prefix = std::string(path.substr(0, path.size() - kExt.size() - 15));
  return out;
}

std::string SplitPath(const std::string& prefix, int part, int count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", part, count);
  return prefix + buf;
}

}  // namespace

bool IsGgufPath(std::string_view path) { return path.ends_with(".gguf"); }

GgufCheckpoint GgufCheckpoint::Open(const std::string& path) {
  GgufCheckpoint ck;
  ck.path_ = path;
  ck.files_.push_back(GgufFile::Open(path));
  const GgufFile& first = ck.files_.front();  // valid until the next push_back
  const GgufValue* count_value = first.FindKey("split.count");
  const std::optional<SplitName> name = ParseSplitName(path);
  int count = 1;
  if (count_value != nullptr) {
    const std::optional<uint64_t> c = count_value->AsUint();
    if (!c || *c == 0 || *c > 99999) {
      throw Error(path + ": split.count is not a count of files from 1 to 99999");
    }
    count = static_cast<int>(*c);
    const GgufValue* no = first.FindKey("split.no");
    if (no == nullptr || no->AsUint() != 0u) {
      const std::string part = no && no->AsUint() ? std::to_string(*no->AsUint() + 1) : "?";
      throw Error(path + ": is part " + part + " of a split set of " + std::to_string(count) +
                  " files; give the first file (split.no 0, NAME-00001-of-" +
                  (name ? SplitPath("", 1, count).substr(10) : std::string("0000N.gguf")) + ")");
    }
  }
  if (count > 1) {
    if (!name || name->count != count || name->part != 1) {
      throw Error(path + ": split.count is " + std::to_string(count) +
                  ", but the name is not NAME-00001-of-" + SplitPath("", 1, count).substr(10) +
                  ", so the other parts cannot be found");
    }
    for (int k = 2; k <= count; ++k) {
      const std::string part_path = SplitPath(name->prefix, k, count);
      GgufFile part = GgufFile::Open(part_path);
      const GgufValue* no = part.FindKey("split.no");
      const GgufValue* c = part.FindKey("split.count");
      if (no == nullptr || c == nullptr || no->AsUint() != static_cast<uint64_t>(k - 1) ||
          c->AsUint() != static_cast<uint64_t>(count)) {
        throw Error(part_path + ": is not part " + std::to_string(k) + " of " +
                    std::to_string(count) + " of this split set (split.no / split.count say " +
                    "otherwise or are missing)");
      }
      ck.files_.push_back(std::move(part));
    }
  } else if (name && name->count > 1) {
    // Named as part of a set, but it says it is not.
    throw Error(path + ": named as part " + std::to_string(name->part) + " of " +
                std::to_string(name->count) + " of a split set, but has no split.count " +
                "metadata (not a gguf-split file)");
  }
  uint64_t total = 0;
  for (size_t f = 0; f < ck.files_.size(); ++f) {
    const std::vector<GgufTensor>& tensors = ck.files_[f].tensors();
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (!ck.where_.emplace(tensors[t].name, std::make_pair(f, t)).second) {
        throw Error(ck.files_[f].path() + ": tensor " + Quoted(tensors[t].name) +
                    " is also in " + ck.files_[ck.where_.at(tensors[t].name).first].path());
      }
      ++total;
    }
  }
  if (count > 1) {
    // Not `first`: the push_backs above may have moved the files.
    const GgufValue* n = ck.files_.front().FindKey("split.tensors.count");
    if (n != nullptr && n->AsUint() != total) {
      throw Error(path + ": split.tensors.count says " +
                  (n->AsUint() ? std::to_string(*n->AsUint()) : std::string("?")) +
                  " tensors, but the " + std::to_string(count) + " files hold " +
                  std::to_string(total));
    }
  }
  return ck;
}

std::pair<const GgufTensor*, const GgufFile*> GgufCheckpoint::Find(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return {nullptr, nullptr};
  const GgufFile& f = files_[it->second.first];
  return {&f.tensors()[it->second.second], &f};
}

std::vector<std::string> GgufCheckpoint::TensorNames() const {
  std::vector<std::string> out;
  for (const auto& [name, where] : where_) out.push_back(name);
  return out;
}

// ---- Names -----------------------------------------------------------------

namespace {

// gguf-py constants.py, TENSOR_NAMES for the norms in MODEL_TENSORS[GLM4_MOE]
// (ATTN_NORM, ATTN_POST_NORM, ATTN_Q_NORM, ATTN_K_NORM, OUTPUT_NORM,
// NEXTN_ENORM, NEXTN_HNORM, NEXTN_SHARED_HEAD_NORM), against the
// Transformers suffixes of tensor_mapping.py; tests/checkpoint/gguf_parity.py
// checks every pair against the installed package.
struct NamePair {
  std::string_view transformers;  // after "model.layers.N."
  std::string_view gguf;          // after "blk.N."
};
constexpr NamePair kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"enorm.weight", "nextn.enorm.weight"},
    {"hnorm.weight", "nextn.hnorm.weight"},
    {"shared_head.norm.weight", "nextn.shared_head_norm.weight"},
};

// "N.rest" -> (N, rest) for a non-negative decimal N without leading zeros.
std::optional<std::pair<int, std::string_view>> SplitLayer(std::string_view s) {
  int layer = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), layer);
  if (ec != std::errc() || end == s.data() || end == s.data() + s.size() || *end != '.' ||
      layer < 0 || (s[0] == '0' && end - s.data() > 1)) {
    return std::nullopt;
  }
  return std::make_pair(layer, s.substr(static_cast<size_t>(end - s.data()) + 1));
}

}  // namespace

std::optional<std::string> GgufNormName(std::string_view name) {
  if (name == "model.norm.weight") return "output_norm.weight";
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const auto split = SplitLayer(name.substr(kPrefix.size()));
  if (!split) return std::nullopt;
  for (const NamePair& p : kLayerNames) {
    if (split->second == p.transformers) {
      return "blk." + std::to_string(split->first) + "." + std::string(p.gguf);
    }
  }
  return std::nullopt;
}

std::optional<std::string> TransformersNormName(std::string_view name) {
  if (name == "output_norm.weight") return "model.norm.weight";
  constexpr std::string_view kPrefix = "blk.";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const auto split = SplitLayer(name.substr(kPrefix.size()));
  if (!split) return std::nullopt;
  for (const NamePair& p : kLayerNames) {
    if (split->second == p.gguf) {
      return "model.layers." + std::to_string(split->first) + "." + std::string(p.transformers);
    }
  }
  return std::nullopt;
}

}  // namespace glmnorm
