// Test helpers: temporary directories, files, and small synthetic
// checkpoints written with glmnorm's own safetensors writer, so each bad-input
// fixture is readable in the test that uses it.
#ifndef GLMNORM_TESTS_CHECKPOINT_FIXTURES_H_
#define GLMNORM_TESTS_CHECKPOINT_FIXTURES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "glmnorm/dtype.h"

namespace glmnorm::test {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& bytes);
void WriteFile(const std::string& path, const std::vector<std::byte>& bytes);
std::string ReadFile(const std::string& path);
bool Exists(const std::string& path);

// bf16 bits of floats, and raw bytes of a vector.
std::vector<uint16_t> Bf16(const std::vector<float>& values);
template <typename T>
std::vector<std::byte> BytesOf(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  return std::vector<std::byte>(p, p + v.size() * sizeof(T));
}

// A safetensors file image from a raw JSON header and data section.
std::vector<std::byte> RawSafetensors(const std::string& header, size_t data_bytes,
                                      std::optional<uint64_t> header_len = std::nullopt);

// A small glm4_moe checkpoint: hidden 8, head_dim 4, 2 layers + 1 MTP
// layer, bf16 gammas, norms split over two shards plus a shard holding only
// a non-norm tensor. Edit the members, then Write().
struct FakeCheckpoint {
  struct Tensor {
    std::string dtype = "BF16";
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
  };
  nlohmann::json config;
  // tensor name -> (shard file, tensor)
  std::map<std::string, std::pair<std::string, Tensor>> tensors;
  // Index entries added after the tensors' own (e.g. naming a missing shard).
  std::map<std::string, std::string> extra_index;
  bool write_index = true;  // false: one model.safetensors

  explicit FakeCheckpoint(bool use_qk_norm = true);
  // A bf16 gamma of `width` entries 1 + i/16.
  static Tensor Gamma(int64_t width);
  void Write(const std::string& dir) const;
};

}  // namespace glmnorm::test

#endif  // GLMNORM_TESTS_CHECKPOINT_FIXTURES_H_
