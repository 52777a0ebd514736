// Numbers in messages and in files glmnorm writes: the shortest decimal text
// that reads back as the same value (std::to_chars), so -1e-9 prints as
// "-1e-09" rather than std::to_string's "-0.000000".
#ifndef GLMNORM_SRC_FORMAT_NUMBER_H_
#define GLMNORM_SRC_FORMAT_NUMBER_H_

#include <charconv>
#include <string>

namespace glmnorm {

inline std::string ShortestString(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

inline std::string ShortestString(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace glmnorm

#endif  // GLMNORM_SRC_FORMAT_NUMBER_H_
