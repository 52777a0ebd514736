// Fuzzes config.json parsing and the norm list derived from it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/norm_layout.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const glmnorm::ModelConfig c = glmnorm::ParseModelConfig(text, "fuzz");
    const auto norms = glmnorm::checkpoint::ExpectedNorms(c);
    for (const glmnorm::NormTensor& n : norms) {
      const auto parsed = glmnorm::checkpoint::ParseNormName(n.name);
      if (!parsed || parsed->role != n.role || parsed->layer != n.layer) __builtin_trap();
    }
  } catch (const glmnorm::Error&) {
  }
  return 0;
}
