#include "npy.h"

#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "glmnorm/error.h"

namespace glmnorm::checkpoint {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kMaxHeaderBytes = 1 << 20;

// A cursor over the header dict, a Python literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Only the forms NumPy writes are accepted.
class DictParser {
 public:
  DictParser(std::string_view text, const std::string& label) : s_(text), label_(label) {}

  void Parse(std::string& descr, std::optional<bool>& fortran,
             std::optional<std::vector<int64_t>>& shape) {
    Expect('{');
    while (true) {
      SkipSpace();
      if (Peek() == '}') break;
      const std::string key = String();
      Expect(':');
      if (key == "descr") {
        descr = String();
      } else if (key == "fortran_order") {
        fortran = Bool();
      } else if (key == "shape") {
        shape = Tuple();
      } else {
        Fail("unexpected key '" + key + "'");
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      SkipSpace();
      if (Peek() != '}') Fail("expected ',' or '}'");
    }
    ++pos_;
    SkipSpace();
    if (pos_ != s_.size()) Fail("trailing characters after the dict");
  }

 private:
  [[noreturn]] void Fail(const std::string& what) {
    throw Error(label_ + ": .npy header: " + what + " at offset " + std::to_string(pos_));
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  void Expect(char c) {
    SkipSpace();
    if (Peek() != c) Fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string String() {
    SkipSpace();
    const char quote = Peek();
    if (quote != '\'' && quote != '"') Fail("expected a quoted string");
    const size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) Fail("unterminated string");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool Bool() {
    SkipSpace();
    if (s_.substr(pos_).starts_with("True")) {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_).starts_with("False")) {
      pos_ += 5;
      return false;
    }
    Fail("expected True or False");
  }
  std::vector<int64_t> Tuple() {
    Expect('(');
    std::vector<int64_t> dims;
    while (true) {
      SkipSpace();
      if (Peek() == ')') break;
      if (Peek() < '0' || Peek() > '9') Fail("expected a dimension");
      int64_t d = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        if (__builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, Peek() - '0', &d)) {
          Fail("dimension too large");
        }
        ++pos_;
      }
      if (Peek() == 'L') ++pos_;  // Python 2 longs
      dims.push_back(d);
      if (dims.size() > 32) Fail("too many dimensions");
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != ')') {
        Fail("expected ',' or ')'");
      }
    }
    ++pos_;
    return dims;
  }

  std::string_view s_;
  const std::string& label_;
  size_t pos_ = 0;
};

std::string_view Descr(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "<f4";
    case DType::kF16:
      return "<f2";
    case DType::kBF16:
      return "<u2";
    default:
      return "";
  }
}

// The data size of an array of `shape`, or nullopt when NumPy would refuse
// the shape as too big. NumPy (PyArray_NewFromDescr) multiplies the element
// size by every non-zero dimension and refuses a product over 2^63 - 1 even
// when another dimension is 0: (0, 2**62, 2**62) is refused, not empty. So
// zeros are skipped for the limit, and every product is overflow-checked.
std::optional<uint64_t> DataBytes(std::span<const int64_t> shape, DType dtype) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonzero_bytes = SizeOf(dtype);
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero_bytes, static_cast<uint64_t>(d), &nonzero_bytes) ||
        nonzero_bytes > kMax) {
      return std::nullopt;
    }
  }
  return empty ? 0 : nonzero_bytes;
}

// NumPy's tuple repr: "()", "(5,)", "(2, 3)".
std::string ShapeText(std::span<const int64_t> shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  return "(" + dims + ")";
}

}  // namespace

NpyArray ParseNpy(std::span<const std::byte> image, const std::string& label) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(image.data());
  if (image.size() < 10 || std::memcmp(bytes, kMagic.data(), kMagic.size()) != 0) {
    throw Error(label + ": not a .npy file (no \\x93NUMPY magic)");
  }
  const int major = bytes[6];
  size_t header_len = 0;
  size_t prefix = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (image.size() < 12) throw Error(label + ": .npy file truncated in its preamble");
    header_len =
        bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    prefix = 12;
  } else {
    throw Error(label + ": .npy format version " + std::to_string(major) + " is not supported");
  }
  if (header_len > kMaxHeaderBytes || header_len > image.size() - prefix) {
    throw Error(label + ": .npy header length " + std::to_string(header_len) +
                " is larger than the file");
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes + prefix), header_len);

  std::string descr;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> shape;
  DictParser(text, label).Parse(descr, fortran, shape);
  if (descr.empty() || !fortran || !shape) {
    throw Error(label + ": .npy header lacks descr, fortran_order or shape");
  }
  NpyArray out;
  if (descr == "<f4") {
    out.dtype = DType::kF32;
  } else if (descr == "<f2") {
    out.dtype = DType::kF16;
  } else if (descr == "<u2") {
    out.dtype = DType::kBF16;
  } else {
    throw Error(label + ": .npy dtype '" + descr +
                "' is not supported (use '<f4', '<f2', or '<u2' holding raw bf16 bits)");
  }
  out.shape = std::move(*shape);
  const std::optional<uint64_t> size = DataBytes(out.shape, out.dtype);
  if (!size) {
    throw Error(label + ": .npy shape " + ShapeText(out.shape) + " of '" + descr +
                "' is too big: its non-zero dimensions times the element size exceed 2^63 - 1 "
                "bytes (NumPy refuses it too)");
  }
  if (*fortran && out.shape.size() > 1) {
    throw Error(label + ": .npy array is in Fortran order; save it C-contiguous");
  }
  const uint64_t data_bytes = *size;
  out.data_offset = prefix + header_len;
  const uint64_t available = image.size() - out.data_offset;
  if (data_bytes != available) {
    throw Error(label + ": .npy shape needs " + std::to_string(data_bytes) +
                " bytes of data, file has " + std::to_string(available));
  }
  out.data_bytes = static_cast<size_t>(data_bytes);
  return out;
}

std::vector<std::byte> EncodeNpy(DType dtype, std::span<const int64_t> shape,
                                 std::span<const std::byte> data) {
  const std::string_view descr = Descr(dtype);
  if (descr.empty()) throw Error(".npy: dtype " + std::string(Name(dtype)) + " cannot be written");
  const std::optional<uint64_t> size = DataBytes(shape, dtype);
  if (!size) throw Error(".npy: shape " + ShapeText(shape) + " is invalid or too big");
  if (*size != data.size()) {
    throw Error(".npy: " + std::to_string(data.size()) + " bytes given, shape " + ShapeText(shape) +
                " needs " + std::to_string(*size));
  }
  std::string header = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': False, 'shape': " + ShapeText(shape) + ", }";
  // Pad with spaces to a multiple of 64 bytes, ending in '\n', as NumPy does.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::vector<std::byte> out(10 + header.size() + data.size());
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  out[6] = std::byte{1};
  out[7] = std::byte{0};
  out[8] = static_cast<std::byte>(header.size() & 0xFF);
  out[9] = static_cast<std::byte>(header.size() >> 8);
  std::memcpy(out.data() + 10, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 10 + header.size(), data.data(), data.size());
  return out;
}

}  // namespace glmnorm::checkpoint
