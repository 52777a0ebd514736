// The one error mechanism of glmnorm: every invalid call throws glmnorm::Error
// before anything is written, with a message that names the argument and
// what was expected.
#ifndef GLMNORM_ERROR_H_
#define GLMNORM_ERROR_H_

#include <stdexcept>
#include <string>

namespace glmnorm {

class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& what) : std::invalid_argument(what) {}
};

}  // namespace glmnorm

#endif  // GLMNORM_ERROR_H_
