#include "printable.h"

#include <cstdint>
#include <cstdio>

namespace glmnorm::tools {
namespace {

void AppendHex(std::string& out, unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[c >> 4];
  out += kHex[c & 0xF];
}

// The length of the valid UTF-8 sequence at text[i] (2 to 4 bytes) and its
// code point, or 0 when the bytes there are not one.
size_t Utf8Sequence(std::string_view text, size_t i, uint32_t* code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, cp = lead & 0x1F, min = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, cp = lead & 0x0F, min = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
  if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  *code_point = cp;
  return n;
}

}  // namespace

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\r') {
      out += "\\r";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c < 0x80) {  // other C0 controls and DEL
      AppendHex(out, c);
      ++i;
    } else {
      uint32_t cp = 0;
      const size_t n = Utf8Sequence(text, i, &cp);
      if (n == 0) {
        AppendHex(out, c);
        ++i;
      } else if (cp >= 0x80 && cp <= 0x9F) {  // C1 controls, e.g. U+009B (CSI)
        for (size_t k = 0; k < n; ++k) AppendHex(out, static_cast<unsigned char>(text[i + k]));
        i += n;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
    }
  }
  return out;
}

void PrintError(std::string_view what) {
  // Some messages (CLI11's) end in a newline; the line has exactly one.
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.remove_suffix(1);
  std::fprintf(stderr, "glmnorm: %s\n", Printable(what).c_str());
  std::fflush(stderr);
}

}  // namespace glmnorm::tools
