// Fuzzes the GGUF parser and tensor access. Any input either throws
// glmnorm::Error or yields tensors whose every byte lies inside the input
// (touched here, so ASan would catch a bad range), within bounded memory (a
// count or length the input cannot hold must be refused, not allocated:
// scripts/fuzz.sh runs with -rss_limit_mb).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "glmnorm/error.h"
#include "glmnorm/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so ASan flags any read past the end.
  const std::vector<std::byte> image(reinterpret_cast<const std::byte*>(data),
                                     reinterpret_cast<const std::byte*>(data) + size);
  try {
    const glmnorm::GgufFile file = glmnorm::GgufFile::Parse(image, "fuzz");
    unsigned sum = 0;
    for (const glmnorm::GgufTensor& t : file.tensors()) {
      const std::span<const std::byte> bytes = file.Bytes(t);
      if (bytes.size() != t.size) __builtin_trap();
      for (std::byte b : bytes) sum += std::to_integer<unsigned>(b);
      if (file.Find(t.name) != &t) __builtin_trap();
      // Names round-trip when they are norms.
      if (const auto hf = glmnorm::TransformersNormName(t.name)) {
        if (glmnorm::GgufNormName(*hf) != t.name) __builtin_trap();
      }
      try {
        std::vector<std::byte> copy;
        const glmnorm::ConstTensorView v = file.View(t, &copy);
        if (v.rank < 1 || v.rank > glmnorm::kMaxRank) __builtin_trap();
      } catch (const glmnorm::Error&) {
        // Not F32/F16/BF16: fine.
      }
    }
    for (const auto& [key, v] : file.metadata()) {
      if (file.FindKey(key) != &v) __builtin_trap();
      for (std::byte b : v.body) sum += std::to_integer<unsigned>(b);
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const glmnorm::Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
