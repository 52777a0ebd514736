// glmnorm's verdict on GGUF files, for the differential test against the
// `gguf` Python package (tests/checkpoint/gguf_parity.py).
//
//   gguf_verdict FILE...     one JSON line per FILE: {"path", "ok": true,
//                            "version", "alignment", "data_offset",
//                            "metadata": [{"key", "type", "value" | "string"
//                            | "element_type", "count", "fnv1a"}],
//                            "tensors": [{"name", "type", "dims", "offset",
//                            "size", "fnv1a"}]} when GgufFile::Open accepts
//                            it, else {"path", "ok": false, "error"}.
//   gguf_verdict --tables    the tables the package must agree with: ggml
//                            types and the glm4moe norm names.
// Exit status 0 unless the program itself fails: the verdicts are the output.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "glmnorm/error.h"
#include "glmnorm/gguf.h"

namespace {

using nlohmann::json;

uint64_t Fnv1a(std::span<const std::byte> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) {
    h ^= std::to_integer<uint64_t>(b);
    h *= 0x100000001b3ull;
  }
  return h;
}

json Scalar(const glmnorm::GgufValue& v) {
  using T = glmnorm::GgufValueType;
  switch (v.type) {
    case T::kInt8: return static_cast<int8_t>(v.bits);
    case T::kInt16: return static_cast<int16_t>(v.bits);
    case T::kInt32: return static_cast<int32_t>(v.bits);
    case T::kInt64: return static_cast<int64_t>(v.bits);
    case T::kBool: return v.bits;  // the byte as stored
    case T::kFloat32:
    case T::kFloat64: {
      const double d = *v.AsFloat();
      if (d != d) return "nan";
      if (d == 1.0 / 0.0) return "inf";
      if (d == -1.0 / 0.0) return "-inf";
      return d;
    }
    default: return v.bits;
  }
}

json Verdict(const std::string& path) {
  json out = {{"path", path}};
  try {
    const glmnorm::GgufFile file = glmnorm::GgufFile::Open(path);
    json metadata = json::array();
    for (const auto& [key, v] : file.metadata()) {
      json e = {{"key", key}, {"type", glmnorm::GgufValueTypeName(v.type)}};
      if (v.type == glmnorm::GgufValueType::kString) {
        e["fnv1a"] = Fnv1a(std::as_bytes(std::span(v.string)));
      } else if (v.type == glmnorm::GgufValueType::kArray) {
        e["element_type"] = glmnorm::GgufValueTypeName(v.element_type);
        e["count"] = v.count;
        e["fnv1a"] = Fnv1a(v.body);
      } else {
        e["value"] = Scalar(v);
      }
      metadata.push_back(std::move(e));
    }
    json tensors = json::array();
    for (const glmnorm::GgufTensor& t : file.tensors()) {
      tensors.push_back({{"name", t.name},
                         {"type", t.type},
                         {"dims", t.dims},
                         {"offset", t.offset},
                         {"size", t.size},
                         {"fnv1a", Fnv1a(file.Bytes(t))}});
    }
    out["ok"] = true;
    out["version"] = file.version();
    out["alignment"] = file.alignment();
    out["data_offset"] = file.data_offset();
    out["metadata"] = std::move(metadata);
    out["tensors"] = std::move(tensors);
  } catch (const glmnorm::Error& e) {
    out["ok"] = false;
    out["error"] = e.what();
  }
  return out;
}

json Tables() {
  json types = json::array();
  for (uint32_t id = 0; id < 256; ++id) {
    if (const auto info = glmnorm::GgmlType(id)) {
      types.push_back({{"id", id},
                       {"name", info->name},
                       {"block_size", info->block_size},
                       {"type_size", info->type_size}});
    }
  }
  json names = json::object();
  const char* suffixes[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                            "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                            "enorm.weight", "hnorm.weight", "shared_head.norm.weight"};
  std::vector<std::string> hf = {"model.norm.weight"};
  for (int layer : {0, 7, 92}) {
    for (const char* s : suffixes) hf.push_back("model.layers." + std::to_string(layer) + "." + s);
  }
  for (const std::string& n : hf) {
    const auto g = glmnorm::GgufNormName(n);
    if (!g) throw std::runtime_error("no GGUF name for " + n);
    const auto back = glmnorm::TransformersNormName(*g);
    if (!back || *back != n) throw std::runtime_error("name round trip fails for " + n);
    names[n] = *g;
  }
  return {{"types", types}, {"norm_names", names}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE... | --tables\n", argv[0]);
    return 2;
  }
  try {
    if (std::strcmp(argv[1], "--tables") == 0) {
      std::printf("%s\n", Tables().dump().c_str());
      return 0;
    }
    for (int i = 1; i < argc; ++i) {
      const std::string line =
          Verdict(argv[i]).dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
      std::printf("%s\n", line.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_verdict: %s\n", e.what());
    return 1;
  }
  return 0;
}
