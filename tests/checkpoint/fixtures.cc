#include "fixtures.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "glmnorm/safetensors.h"

namespace glmnorm::test {

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/glmnorm_ckpt_XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = name.data();
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void WriteFile(const std::string& path, const std::vector<std::byte>& bytes) {
  WriteFile(path, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::vector<uint16_t> Bf16(const std::vector<float>& values) {
  std::vector<uint16_t> out;
  for (float v : values) out.push_back(BF16FromF32(v));
  return out;
}

std::vector<std::byte> RawSafetensors(const std::string& header, size_t data_bytes,
                                      std::optional<uint64_t> header_len) {
  const uint64_t len = header_len.value_or(header.size());
  std::vector<std::byte> out(8 + header.size() + data_bytes, std::byte{0x3c});
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((len >> (8 * i)) & 0xFF);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

FakeCheckpoint::Tensor FakeCheckpoint::Gamma(int64_t width) {
  std::vector<float> v;
  for (int64_t i = 0; i < width; ++i) v.push_back(1.0f + static_cast<float>(i) / 16.0f);
  return Tensor{"BF16", {width}, BytesOf(Bf16(v))};
}

FakeCheckpoint::FakeCheckpoint(bool use_qk_norm) {
  config = {{"architectures", {"Glm4MoeForCausalLM"}},
            {"model_type", "glm4_moe"},
            {"hidden_size", 8},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 3},
            {"head_dim", 4},
            {"rms_norm_eps", 1e-5},
            {"use_qk_norm", use_qk_norm},
            {"num_nextn_predict_layers", 1}};
  auto add = [&](const std::string& name, const std::string& shard, int64_t width) {
    tensors[name] = {shard, Gamma(width)};
  };
  for (int layer = 0; layer < 3; ++layer) {
    const std::string shard =
        layer == 0 ? "model-00001-of-00003.safetensors" : "model-00002-of-00003.safetensors";
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    add(p + "input_layernorm.weight", shard, 8);
    add(p + "post_attention_layernorm.weight", shard, 8);
    if (use_qk_norm) {
      add(p + "self_attn.q_norm.weight", shard, 4);
      add(p + "self_attn.k_norm.weight", shard, 4);
    }
  }
  add("model.norm.weight", "model-00002-of-00003.safetensors", 8);
  add("model.layers.2.enorm.weight", "model-00002-of-00003.safetensors", 8);
  add("model.layers.2.hnorm.weight", "model-00002-of-00003.safetensors", 8);
  add("model.layers.2.shared_head.norm.weight", "model-00002-of-00003.safetensors", 8);
  // Non-norm tensors, one shard of them alone (never mapped).
  tensors["model.embed_tokens.weight"] = {"model-00001-of-00003.safetensors",
                                          Tensor{"BF16", {4, 8}, std::vector<std::byte>(64)}};
  tensors["lm_head.weight"] = {"model-00003-of-00003.safetensors",
                               Tensor{"BF16", {4, 8}, std::vector<std::byte>(64)}};
}

void FakeCheckpoint::Write(const std::string& dir) const {
  WriteFile(dir + "/config.json", config.dump(2));
  std::map<std::string, std::vector<SafetensorsEntry>> shards;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  for (const auto& [name, entry] : tensors) {
    const auto& [shard, t] = entry;
    const std::string file = write_index ? shard : "model.safetensors";
    shards[file].push_back(SafetensorsEntry{name, t.dtype, t.shape, t.bytes});
    index["weight_map"][name] = file;
  }
  for (const auto& [name, shard] : extra_index) index["weight_map"][name] = shard;
  for (const auto& [file, entries] : shards) {
    WriteFile(dir + "/" + file, EncodeSafetensors(entries, {{"format", "pt"}}));
  }
  if (write_index) WriteFile(dir + "/model.safetensors.index.json", index.dump(2));
}

}  // namespace glmnorm::test
