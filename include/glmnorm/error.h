// The one error mechanism of glmnorm: every invalid call throws glmnorm::Error
// before anything is written, with a message that names the argument and
// what was expected.
#ifndef GLMNORM_ERROR_H_
#define GLMNORM_ERROR_H_

#include <stdexcept>
#include <string>

namespace glmnorm {

// What was wrong, for bindings that map errors to their language's kinds
// (Python: kType -> TypeError, kValue -> ValueError).
enum class ErrorKind {
  kValue,  // a shape, stride, value, overlap or option out of range
  kType,   // an unsupported dtype or combination of dtypes
};

class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::kValue)
      : std::invalid_argument(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace glmnorm

#endif  // GLMNORM_ERROR_H_
