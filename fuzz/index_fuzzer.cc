// Fuzzes model.safetensors.index.json parsing: accepted shard names never
// leave the checkpoint directory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "io/norm_layout.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const glmnorm::ShardIndex index = glmnorm::ParseShardIndex(text, "fuzz");
    for (const auto& [name, shard] : index.weight_map) {
      if (shard.empty() || shard.front() == '/') __builtin_trap();
      size_t start = 0;
      while (start <= shard.size()) {
        size_t slash = shard.find('/', start);
        if (slash == std::string::npos) slash = shard.size();
        const std::string_view part(shard.data() + start, slash - start);
        if (part.empty() || part == "." || part == "..") __builtin_trap();
        start = slash + 1;
      }
      glmnorm::checkpoint::ParseNormName(name);
    }
  } catch (const glmnorm::Error&) {
  }
  return 0;
}
