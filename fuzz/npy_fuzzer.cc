// Fuzzes the .npy parser: an accepted array's data range must lie inside the
// input (every byte is touched).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "npy.h"
#include "glmnorm/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::byte> image(reinterpret_cast<const std::byte*>(data),
                                     reinterpret_cast<const std::byte*>(data) + size);
  try {
    const glmnorm::checkpoint::NpyArray a = glmnorm::checkpoint::ParseNpy(image, "fuzz");
    if (a.data_offset + a.data_bytes != image.size()) __builtin_trap();
    unsigned sum = 0;
    for (size_t i = a.data_offset; i < a.data_offset + a.data_bytes; ++i) {
      sum += std::to_integer<unsigned>(image[i]);
    }
    volatile unsigned sink = sum;
    (void)sink;
    // What parses must re-encode to an identical header.
    const auto again = glmnorm::checkpoint::EncodeNpy(
        a.dtype, a.shape, std::span(image).subspan(a.data_offset, a.data_bytes));
    if (glmnorm::checkpoint::ParseNpy(again, "again").shape != a.shape) __builtin_trap();
  } catch (const glmnorm::Error&) {
  }
  return 0;
}
