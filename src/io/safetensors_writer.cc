// The safetensors writer, used for `glmnorm apply` output and test fixtures.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"

namespace glmnorm {

std::vector<std::byte> EncodeSafetensors(std::span<const SafetensorsEntry> entries,
                                         const std::map<std::string, std::string>& metadata) {
  // Widest elements first, then by name (the reference writer's order): with
  // an 8-aligned data section every tensor then starts aligned to its
  // element size, so readers can view it in place.
  std::vector<const SafetensorsEntry*> order;
  std::set<std::string_view> names;
  for (const SafetensorsEntry& e : entries) {
    const int bits = SafetensorsDTypeBits(e.dtype);
    if (bits == 0) throw Error("safetensors: tensor \"" + e.name + "\": unknown dtype " + e.dtype);
    if (e.name == "__metadata__" || !names.insert(e.name).second) {
      throw Error("safetensors: tensor name \"" + e.name + "\" used twice or reserved");
    }
    uint64_t total_bits = static_cast<uint64_t>(bits);
    for (int64_t d : e.shape) {
      if (d < 0 || __builtin_mul_overflow(total_bits, static_cast<uint64_t>(d), &total_bits)) {
        throw Error("safetensors: tensor \"" + e.name + "\": invalid shape");
      }
    }
    if (total_bits % 8 != 0 || total_bits / 8 != e.bytes.size()) {
      throw Error("safetensors: tensor \"" + e.name + "\": " + std::to_string(e.bytes.size()) +
                  " bytes given, shape and dtype need " + std::to_string(total_bits / 8));
    }
    order.push_back(&e);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const int wa = SafetensorsDTypeBits(a->dtype), wb = SafetensorsDTypeBits(b->dtype);
    return wa != wb ? wa > wb : a->name < b->name;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry* e : order) {
    header[e->name] = {{"dtype", e->dtype},
                       {"shape", e->shape},
                       {"data_offsets", {offset, offset + e->bytes.size()}}};
    offset += e->bytes.size();
  }
  std::string text = header.dump();
  // Pad with spaces (allowed by the format) so the data section is 8-aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<std::byte> out(8 + text.size() + offset);
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((len >> (8 * i)) & 0xFF);
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::byte* data = out.data() + 8 + text.size();
  for (const SafetensorsEntry* e : order) {
    if (!e->bytes.empty()) std::memcpy(data, e->bytes.data(), e->bytes.size());
    data += e->bytes.size();
  }
  return out;
}

}  // namespace glmnorm
