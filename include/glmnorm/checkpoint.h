// The RMSNorms of a GLM-4.5 (glm4_moe) checkpoint directory: found, checked
// and ready to apply (docs/CHECKPOINTS.md, docs/SPEC.md §5).
//
//   auto norms = glmnorm::CheckpointNorms::Open("/models/GLM-4.5-Air");
//   for (const std::string& p : norms.problems()) ...;   // empty when sound
//   glmnorm::RmsNorm(x, norms.Gamma("model.norm.weight"), y, norms.Options());
//
// Open reads config.json and model.safetensors.index.json (or a single
// model.safetensors), maps only the shards that hold norm tensors, and reads
// only those tensors' bytes: a 355B checkpoint opens in milliseconds. The
// gamma views point into the read-only mappings (zero-copy) and stay valid
// as long as the CheckpointNorms object (moving it keeps them valid).
//
// Open also takes a GGUF file (llama.cpp, architecture glm4moe) or the first
// file of a GGUF split set: the config comes from its metadata (ConfigFromGguf
// in checkpoint_norms.cc), the norms are found under llama.cpp's names
// (glmnorm/gguf.h) and reported under Transformers' names.
#ifndef GLMNORM_CHECKPOINT_H_
#define GLMNORM_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glmnorm/rms_norm.h"
#include "glmnorm/tensor.h"

namespace glmnorm {

// The config.json fields the norms depend on.
struct ModelConfig {
  std::string model_type;                // "glm4_moe" for GLM-4.5 and -Air
  int64_t hidden_size = 0;               // 5120 / 4096
  int64_t num_hidden_layers = 0;         // 92 / 46 (the MTP layers come after)
  int64_t num_attention_heads = 0;       // 96
  std::optional<int64_t> head_dim;       // the head_dim kwarg (128); absent: nullopt
  std::optional<double> rms_norm_eps;    // 1e-5; absent: nullopt (never guessed)
  bool use_qk_norm = false;              // true for GLM-4.5, false for -Air
  int64_t num_nextn_predict_layers = 0;  // MTP layers (1)
};

// Parses config.json text. Throws glmnorm::Error "<label>: ..." when it is not
// a JSON object, when hidden_size or num_hidden_layers is missing, or when a
// field has the wrong type or an impossible value. A missing rms_norm_eps or
// head_dim is not an error here: CheckpointNorms reports it as a problem.
ModelConfig ParseModelConfig(std::string_view json_text, const std::string& label);

// model.safetensors.index.json: {"metadata": {"total_size": N},
// "weight_map": {tensor name: shard file name}}.
struct ShardIndex {
  std::map<std::string, std::string> weight_map;
  std::optional<uint64_t> total_size;
};

// Throws glmnorm::Error "<label>: ..." for malformed JSON, a missing or
// non-object weight_map, a duplicate tensor name, or a shard name that is
// empty, absolute or climbs out of the directory ("..").
ShardIndex ParseShardIndex(std::string_view json_text, const std::string& label);

enum class NormRole : uint8_t {
  kInputLayernorm,          // model.layers.i.input_layernorm          [hidden]
  kPostAttentionLayernorm,  // model.layers.i.post_attention_layernorm [hidden]
  kQNorm,                   // model.layers.i.self_attn.q_norm         [head_dim]
  kKNorm,                   // model.layers.i.self_attn.k_norm         [head_dim]
  kFinalNorm,               // model.norm                              [hidden]
  kMtpENorm,                // model.layers.N.enorm                    [hidden]
  kMtpHNorm,                // model.layers.N.hnorm                    [hidden]
  kMtpSharedHeadNorm,       // model.layers.N.shared_head.norm         [hidden]
};
// "input_layernorm", "post_attention_layernorm", "q_norm", "k_norm",
// "final_norm", "mtp_enorm", "mtp_hnorm", "mtp_shared_head_norm".
std::string_view RoleName(NormRole role);

// Statistics of a gamma (over its finite values).
struct GammaStats {
  float min = 0.0f;
  float mean = 0.0f;
  float max = 0.0f;
  int64_t nan_count = 0;
  int64_t inf_count = 0;
};

// One expected norm of the model.
struct NormTensor {
  std::string name;  // "model.layers.3.self_attn.q_norm.weight"
  NormRole role;
  int layer = -1;              // decoder layer (>= num_hidden_layers: MTP); -1: model.norm
  int64_t expected_width = 0;  // hidden_size or head_dim (0 when head_dim is unknown)
  bool present = false;        // found in its shard
  std::string shard;           // file name from the index ("" when not present)
  std::string stored_name;     // the name in the file: `name`, or the GGUF name
  std::string dtype;           // safetensors dtype name ("BF16"), or ggml type name, when present
  std::vector<int64_t> shape;  // as stored, when present
  GammaStats stats;            // when present with a float dtype
  // The tensor's bytes as stored (a view into the file), when present,
  // whether or not it passed the checks (glmnorm diff compares them).
  std::span<const std::byte> stored_bytes;
  // Set when the gamma passed every check (present, BF16/F16/F32, 1-D of the
  // expected width, all finite); data == nullptr otherwise.
  ConstTensorView gamma;
  bool usable() const { return gamma.data != nullptr; }
};

class CheckpointNorms {
 public:
  // Opens the checkpoint directory `dir`, or the GGUF file `dir` (a .gguf
  // file, or the first file of a split set NAME-00001-of-0000N.gguf; a
  // directory holding GGUF files and nothing else opens its one GGUF
  // checkpoint). Throws glmnorm::Error (one line: the file and why) when it
  // cannot be read: config.json missing or not valid, no index and no
  // model.safetensors, an invalid index, a shard holding norms that is
  // missing or not a valid safetensors file, a malformed GGUF file or split
  // set, GGUF metadata without embedding_length or block_count, or a
  // directory holding both a safetensors checkpoint and GGUF files.
  // Everything else that is wrong is collected in problems().
  static CheckpointNorms Open(const std::string& dir);

  CheckpointNorms(CheckpointNorms&&) noexcept;
  CheckpointNorms& operator=(CheckpointNorms&&) noexcept;
  ~CheckpointNorms();

  // The path given to Open (without trailing slashes).
  const std::string& dir() const { return dir_; }
  // "safetensors" or "gguf".
  std::string_view format() const { return gguf_ ? "gguf" : "safetensors"; }
  // Where the config came from: "config.json", or the GGUF file's name.
  const std::string& config_source() const { return config_source_; }
  const ModelConfig& config() const { return config_; }
  // "GLM-4.5", "GLM-4.5-Air" (by their shapes), else "glm4_moe", else the
  // model_type as written.
  const std::string& model_name() const { return model_name_; }

  // Every norm the config implies, in model order (layer by layer, then
  // model.norm), whether present or not.
  const std::vector<NormTensor>& norms() const { return norms_; }
  // By Transformers name, or by GGUF name (blk.0.attn_norm.weight) for any
  // checkpoint; nullptr: not a norm of this model.
  const NormTensor* Find(std::string_view name) const;

  // One line per problem found (missing or unexpected norms, wrong widths,
  // dtypes or shapes, NaN/inf gammas, missing/suspicious rms_norm_eps,
  // missing shards). Empty when the checkpoint is sound.
  const std::vector<std::string>& problems() const { return problems_; }
  bool sound() const { return problems_.empty(); }

  // rms_norm_eps as the kernels take it. Throws when config.json has none.
  float eps() const;
  // eps() and the given rounding.
  NormOptions Options(Rounding rounding = Rounding::kCastThenScale) const;
  // The gamma of a norm by tensor name. Throws glmnorm::Error when the name
  // is not a norm of this model or the tensor failed its checks (the message
  // says why).
  ConstTensorView Gamma(std::string_view name) const;

  // The shard files (names from the index) that were mapped: only those
  // holding norm tensors. For GGUF: every file of the set.
  std::vector<std::string> mapped_shards() const;

 private:
  CheckpointNorms() = default;
  struct Shards;
  void Load();
  void LoadGguf();
  void CheckConfig(const std::string& eps_key, const std::string& head_dim_key);
  bool CheckNorm(NormTensor& norm, std::span<const std::byte> bytes, std::optional<DType> dtype,
                 const std::string& label);

  std::string dir_;
  bool gguf_ = false;
  std::string config_source_ = "config.json";
  ModelConfig config_;
  std::string model_name_;
  std::vector<NormTensor> norms_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::vector<std::string> problems_;
  std::unique_ptr<Shards> shards_;
};

}  // namespace glmnorm

#endif  // GLMNORM_CHECKPOINT_H_
