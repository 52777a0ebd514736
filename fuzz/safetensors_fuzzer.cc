// Fuzzes the safetensors header parser and tensor access. Any input either
// throws glmnorm::Error or yields tensors whose every byte lies inside the
// input (touched here, so ASan would catch a bad range).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so ASan flags any read past the end.
  const std::vector<std::byte> image(reinterpret_cast<const std::byte*>(data),
                                     reinterpret_cast<const std::byte*>(data) + size);
  try {
    const glmnorm::SafetensorsFile file = glmnorm::SafetensorsFile::Parse(image, "fuzz");
    unsigned sum = 0;
    for (const glmnorm::SafetensorsTensor& t : file.tensors()) {
      for (std::byte b : file.Bytes(t)) sum += std::to_integer<unsigned>(b);
      if (file.Find(t.name) != &t) __builtin_trap();
      try {
        std::vector<std::byte> copy;
        const glmnorm::ConstTensorView v = file.View(t, &copy);
        if (v.rank < 1 || v.rank > glmnorm::kMaxRank) __builtin_trap();
      } catch (const glmnorm::Error&) {
        // Not a viewable dtype or rank: fine.
      }
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const glmnorm::Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
