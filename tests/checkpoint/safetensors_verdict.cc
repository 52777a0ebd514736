// glmnorm's verdict on safetensors files, for the differential test against
// the reference reader (tests/checkpoint/safetensors_parity.py).
//
//   safetensors_verdict FILE...
//
// For each FILE prints one JSON line: {"path", "ok": true, "metadata",
// "tensors": [{"name", "dtype", "shape", "begin", "end", "fnv1a"}]} when
// SafetensorsFile::Open accepts it (every tensor's bytes are then read, and
// viewed when View supports the dtype and rank), or {"path", "ok": false,
// "error"} with the message it threw. Exit status 0 unless the program
// itself fails: the verdicts are the output.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"

namespace {

using nlohmann::json;

// FNV-1a, 64 bits: the parity script hashes the reference's bytes the same
// way, so a wrong offset shows up even when both readers accept the file.
uint64_t Fnv1a(std::span<const std::byte> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) {
    h ^= std::to_integer<uint64_t>(b);
    h *= 0x100000001b3ull;
  }
  return h;
}

json Verdict(const std::string& path) {
  json out = {{"path", path}};
  try {
    const glmnorm::SafetensorsFile file = glmnorm::SafetensorsFile::Open(path);
    json tensors = json::array();
    for (const glmnorm::SafetensorsTensor& t : file.tensors()) {
      json entry = {{"name", t.name},   {"dtype", t.dtype}, {"shape", t.shape},
                    {"begin", t.begin}, {"end", t.end},     {"fnv1a", Fnv1a(file.Bytes(t))}};
      if (glmnorm::DTypeFromSafetensors(t.dtype) &&
          t.shape.size() <= static_cast<size_t>(glmnorm::kMaxRank)) {
        // Not part of the verdict (View is for norm math, not file
        // validity), but it must not misbehave on anything Open accepted.
        try {
          std::vector<std::byte> copy;
          const glmnorm::ConstTensorView v = file.View(t, &copy);
          entry["view_rank"] = v.rank;
        } catch (const glmnorm::Error& e) {
          entry["view_error"] = e.what();
        }
      }
      tensors.push_back(std::move(entry));
    }
    out["ok"] = true;
    out["metadata"] = file.metadata();
    out["tensors"] = std::move(tensors);
  } catch (const glmnorm::Error& e) {
    out["ok"] = false;
    out["error"] = e.what();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE...\n", argv[0]);
    return 2;
  }
  try {
    for (int i = 1; i < argc; ++i) {
      // ensure_ascii + replace: one line of ASCII whatever the names hold.
      const std::string line =
          Verdict(argv[i]).dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
      std::printf("%s\n", line.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_verdict: %s\n", e.what());
    return 1;
  }
  return 0;
}
