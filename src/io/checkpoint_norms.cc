// CheckpointNorms: finds, checks and serves the RMSNorm gammas of a checkpoint.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <set>

#include "io/mapped_file.h"
#include "io/norm_layout.h"
#include "core/format_number.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"
#include "glmnorm/gguf.h"
#include "glmnorm/safetensors.h"

namespace glmnorm {
namespace {

constexpr size_t kMaxJsonFileBytes = 64u << 20;  // the 355B index is ~100 KB
constexpr char kConfigFile[] = "config.json";
constexpr char kIndexFile[] = "model.safetensors.index.json";
constexpr char kSingleFile[] = "model.safetensors";
// The constructor default of Transformers' RMSNorm classes and of LLaMA
// ports; a GLM-4.5 config carrying it was most likely written by a port.
constexpr double kSuspiciousEps = 1e-6;

// Whether anything is at `path`: a directory or FIFO where a JSON file or a
// shard belongs is reported as what it is by its reader, not taken for a
// missing file.
bool PathExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

float LoadAsFloat(const std::byte* p, DType dtype) {
  uint16_t h;
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16:
      std::memcpy(&h, p, 2);
      return F32FromBF16(h);
    case DType::kF16:
      std::memcpy(&h, p, 2);
      return F32FromF16(h);
    default:
      return std::nanf("");
  }
}

GammaStats Stats(std::span<const std::byte> bytes, DType dtype, int64_t* first_bad) {
  GammaStats s;
  const size_t size = SizeOf(dtype);
  const size_t n = bytes.size() / size;
  double sum = 0.0;
  int64_t finite = 0;
  s.min = std::numeric_limits<float>::infinity();
  s.max = -std::numeric_limits<float>::infinity();
  *first_bad = -1;
  for (size_t i = 0; i < n; ++i) {
    const float v = LoadAsFloat(bytes.data() + i * size, dtype);
    if (std::isfinite(v)) {
      s.min = std::min(s.min, v);
      s.max = std::max(s.max, v);
      sum += v;
      ++finite;
      continue;
    }
    if (*first_bad < 0) *first_bad = static_cast<int64_t>(i);
    (std::isnan(v) ? s.nan_count : s.inf_count) += 1;
  }
  if (finite == 0) {
    s.min = s.max = 0.0f;
  } else {
    s.mean = static_cast<float>(sum / static_cast<double>(finite));
  }
  return s;
}

// Whether `name` ends in "-KKKKK-of-NNNNN.gguf" (a split set's part K).
bool SplitPart(std::string_view name, int* part) {
  constexpr std::string_view kTail = "-00000-of-00000.gguf";
  if (name.size() <= kTail.size()) return false;
  const std::string_view tail = name.substr(name.size() - kTail.size());
  *part = 0;
  for (size_t i = 0; i < kTail.size(); ++i) {
    if (kTail[i] == '0') {
      if (tail[i] < '0' || tail[i] > '9') return false;
      if (i >= 1 && i <= 5) *part = *part * 10 + (tail[i] - '0');
    } else if (tail[i] != kTail[i]) {
      return false;
    }
  }
  return true;
}

std::string ModelName(const ModelConfig& c) {
  if (c.model_type == "glm4_moe") {
    if (c.hidden_size == 5120 && c.num_hidden_layers == 92 && c.use_qk_norm) return "GLM-4.5";
    if (c.hidden_size == 4096 && c.num_hidden_layers == 46 && !c.use_qk_norm) return "GLM-4.5-Air";
    return "glm4_moe";
  }
  return c.model_type.empty() ? "(no model_type)" : c.model_type;
}

}  // namespace

std::string_view RoleName(NormRole role) {
  switch (role) {
    case NormRole::kInputLayernorm:
      return "input_layernorm";
    case NormRole::kPostAttentionLayernorm:
      return "post_attention_layernorm";
    case NormRole::kQNorm:
      return "q_norm";
    case NormRole::kKNorm:
      return "k_norm";
    case NormRole::kFinalNorm:
      return "final_norm";
    case NormRole::kMtpENorm:
      return "mtp_enorm";
    case NormRole::kMtpHNorm:
      return "mtp_hnorm";
    case NormRole::kMtpSharedHeadNorm:
      return "mtp_shared_head_norm";
  }
  return "?";
}

struct CheckpointNorms::Shards {
  std::map<std::string, SafetensorsFile> files;  // by shard name, only those mapped
  std::deque<std::vector<std::byte>> copies;     // gammas the format left unaligned
  std::optional<GgufCheckpoint> gguf;            // a GGUF checkpoint: every file of it
};

CheckpointNorms::CheckpointNorms(CheckpointNorms&&) noexcept = default;
CheckpointNorms& CheckpointNorms::operator=(CheckpointNorms&&) noexcept = default;
CheckpointNorms::~CheckpointNorms() = default;

CheckpointNorms CheckpointNorms::Open(const std::string& dir) {
  CheckpointNorms n;
  n.dir_ = dir;
  while (n.dir_.size() > 1 && n.dir_.back() == '/') n.dir_.pop_back();
  n.shards_ = std::make_unique<Shards>();
  struct stat st {};
  const bool exists = stat(n.dir_.c_str(), &st) == 0;
  if ((exists && !S_ISDIR(st.st_mode)) || (!exists && IsGgufPath(n.dir_))) {
    // A file (or a .gguf that is not there: the reader says why).
    if (!IsGgufPath(n.dir_)) {
      throw Error(n.dir_ + ": is " + std::string(checkpoint::FileTypeName(st.st_mode)) +
                  ", expected a checkpoint directory (config.json, safetensors shards) or a "
                  ".gguf file");
    }
    n.gguf_ = true;
    n.LoadGguf();
    return n;
  }
  if (exists && S_ISDIR(st.st_mode)) {
    // GGUF files beside the checkpoint: say so rather than pick one.
    std::vector<std::string> ggufs;
    if (DIR* d = opendir(n.dir_.c_str())) {
      while (const dirent* e = readdir(d)) {
        if (IsGgufPath(e->d_name)) ggufs.push_back(e->d_name);
      }
      closedir(d);
    }
    std::sort(ggufs.begin(), ggufs.end());
    const bool safetensors = PathExists(n.dir_ + "/" + kConfigFile) ||
                             PathExists(n.dir_ + "/" + kIndexFile) ||
                             PathExists(n.dir_ + "/" + kSingleFile);
    if (!ggufs.empty() && safetensors) {
      throw Error(n.dir_ + ": holds both a safetensors checkpoint (config.json, shards) and " +
                  std::to_string(ggufs.size()) + " GGUF file(s) (" + ggufs.front() +
                  (ggufs.size() > 1 ? ", ..." : "") +
                  "); give the .gguf file itself to read the GGUF one");
    }
    if (!ggufs.empty()) {
      // One GGUF checkpoint: one file, or one split set (its first file).
      std::vector<std::string> firsts;
      for (const std::string& g : ggufs) {
        int part = 0;
        if (!SplitPart(g, &part) || part == 1) firsts.push_back(g);
      }
      if (firsts.size() != 1) {
        throw Error(n.dir_ + ": holds " + std::to_string(firsts.size()) +
                    " GGUF checkpoints; give the .gguf file to read");
      }
      n.dir_ += "/" + firsts.front();
      n.gguf_ = true;
      n.LoadGguf();
      return n;
    }
  }
  n.Load();
  return n;
}

void CheckpointNorms::Load() {
  const std::string config_path = dir_ + "/" + kConfigFile;
  config_ =
      ParseModelConfig(checkpoint::ReadSmallFile(config_path, kMaxJsonFileBytes), config_path);
  model_name_ = ModelName(config_);
  auto problem = [&](std::string text) { problems_.push_back(std::move(text)); };

  if (config_.model_type != "glm4_moe") {
    problem(std::string(kConfigFile) + ": model_type is \"" + config_.model_type +
            "\", expected \"glm4_moe\" (GLM-4.5, GLM-4.5-Air)");
  }
  CheckConfig("rms_norm_eps", "head_dim");

  norms_ = checkpoint::ExpectedNorms(config_);
  for (size_t i = 0; i < norms_.size(); ++i) by_name_.emplace(norms_[i].name, i);

  // Where each tensor lives.
  ShardIndex index;
  const std::string index_path = dir_ + "/" + kIndexFile;
  const std::string single_path = dir_ + "/" + kSingleFile;
  if (PathExists(index_path)) {
    index = ParseShardIndex(checkpoint::ReadSmallFile(index_path, kMaxJsonFileBytes), index_path);
  } else if (PathExists(single_path)) {
    SafetensorsFile file = SafetensorsFile::Open(single_path);
    for (const SafetensorsTensor& t : file.tensors()) index.weight_map.emplace(t.name, kSingleFile);
    shards_->files.emplace(kSingleFile, std::move(file));
  } else {
    throw Error(dir_ + ": no " + kIndexFile + " and no " + kSingleFile +
                " (not a safetensors checkpoint directory)");
  }

  // Map exactly the shards that hold norms; a shard that cannot be read is
  // fatal because its norms cannot be checked.
  for (NormTensor& norm : norms_) {
    auto it = index.weight_map.find(norm.name);
    if (it == index.weight_map.end()) continue;
    if (!shards_->files.count(it->second)) {
      shards_->files.emplace(it->second, SafetensorsFile::Open(dir_ + "/" + it->second));
    }
  }

  for (NormTensor& norm : norms_) {
    const std::string role(RoleName(norm.role));
    auto it = index.weight_map.find(norm.name);
    if (it == index.weight_map.end()) {
      const std::string width =
          norm.expected_width > 0 ? "[" + std::to_string(norm.expected_width) + "]" : "[head_dim]";
      problem("missing norm " + norm.name + " (" + role + ", expected " + width + ")");
      continue;
    }
    const SafetensorsFile& file = shards_->files.at(it->second);
    const SafetensorsTensor* t = file.Find(norm.name);
    if (t == nullptr) {
      problem("missing norm " + norm.name + ": " + kIndexFile + " maps it to " + it->second +
              ", which does not contain it");
      continue;
    }
    norm.present = true;
    norm.shard = it->second;
    norm.stored_name = norm.name;
    norm.dtype = t->dtype;
    norm.shape = t->shape;
    norm.stored_bytes = file.Bytes(*t);
    const std::optional<DType> dtype = DTypeFromSafetensors(t->dtype);
    if (!CheckNorm(norm, file.Bytes(*t), dtype, norm.name)) continue;
    std::vector<std::byte> copy;
    norm.gamma = file.View(*t, &copy);
    if (!copy.empty()) {
      shards_->copies.push_back(std::move(copy));
      norm.gamma.data = shards_->copies.back().data();
    }
  }

  // Norm-shaped tensors the config does not call for: an engine following
  // the config would silently ignore them (e.g. q/k norms with
  // use_qk_norm false), which usually means config and weights disagree.
  const int64_t total_layers = config_.num_hidden_layers + config_.num_nextn_predict_layers;
  for (const auto& [name, shard] : index.weight_map) {
    if (by_name_.count(name)) continue;
    const std::optional<checkpoint::NormName> parsed = checkpoint::ParseNormName(name);
    if (!parsed) continue;
    std::string why;
    if (parsed->layer >= total_layers) {
      why = "layer " + std::to_string(parsed->layer) + " is beyond num_hidden_layers + " +
            "num_nextn_predict_layers = " + std::to_string(total_layers);
    } else if (parsed->role == NormRole::kQNorm || parsed->role == NormRole::kKNorm) {
      why = "config.json has use_qk_norm false, so this gamma would be ignored";
    } else {
      why = "not a norm of layer " + std::to_string(parsed->layer) + " in this model";
    }
    problem("unexpected norm " + name + ": " + why);
  }

  // Shards the index names that do not exist (only stat'ed, never mapped).
  std::map<std::string, int> others;
  for (const auto& [name, shard] : index.weight_map) {
    if (!shards_->files.count(shard)) ++others[shard];
  }
  for (const auto& [shard, count] : others) {
    struct stat st {};
    if (stat((dir_ + "/" + shard).c_str(), &st) != 0) {
      problem(std::string(kIndexFile) + " names shard " + shard + " (" + std::to_string(count) +
              " tensors), which does not exist");
    } else if (!S_ISREG(st.st_mode)) {
      problem(std::string(kIndexFile) + " names shard " + shard + " (" + std::to_string(count) +
              " tensors), which is " + std::string(checkpoint::FileTypeName(st.st_mode)) +
              ", expected a regular file");
    }
  }
}

void CheckpointNorms::CheckConfig(const std::string& eps_key, const std::string& head_dim_key) {
  auto problem = [&](std::string text) { problems_.push_back(std::move(text)); };
  const std::string& src = config_source_;
  if (!config_.rms_norm_eps) {
    problem(src + ": " + eps_key +
            " is missing; GLM-4.5 uses 1e-05 and glmnorm will not guess it");
  } else {
    const double eps = *config_.rms_norm_eps;
    if (!std::isfinite(eps) || eps < 0.0 || eps > 1.0) {
      problem(src + ": " + eps_key + " = " + ShortestString(eps) +
              " is not a small non-negative number");
    } else if (std::fabs(eps - kSuspiciousEps) < 1e-12) {
      problem(src + ": " + eps_key +
              " is 1e-06, the default of Transformers' RMSNorm classes and of "
              "LLaMA ports; GLM-4.5 checkpoints use 1e-05 (warning: check where this " +
              (gguf_ ? "file" : "config") + " came from)");
    }
  }
  if (config_.use_qk_norm && !config_.head_dim) {
    std::string derived;
    if (config_.num_attention_heads > 0) {
      derived = " (hidden_size / num_attention_heads = " +
                std::to_string(config_.hidden_size / config_.num_attention_heads) +
                " is not it in GLM-4.5)";
    }
    problem(src + ": " + head_dim_key +
            " is missing, so the width of the q/k norms is unknown" + derived);
  }
}

bool CheckpointNorms::CheckNorm(NormTensor& norm, std::span<const std::byte> bytes,
                                std::optional<DType> dtype, const std::string& label) {
  auto problem = [&](std::string text) { problems_.push_back(std::move(text)); };
  if (!dtype || !IsFloatActivation(*dtype)) {
    problem(label + ": dtype " + norm.dtype + ", expected BF16, F16 or F32");
    return false;
  }
  int64_t first_bad = -1;
  norm.stats = Stats(bytes, *dtype, &first_bad);
  bool ok = true;
  if (norm.shape.size() != 1) {
    problem(label + ": shape " + ShapeString(norm.shape) + ", expected a 1-D gamma [" +
            std::to_string(norm.expected_width) + "]");
    ok = false;
  } else {
    const int64_t width = norm.shape[0];
    const bool qk = norm.role == NormRole::kQNorm || norm.role == NormRole::kKNorm;
    if (qk && width == config_.hidden_size && width != norm.expected_width) {
      problem(label + ": width " + std::to_string(width) +
              " is hidden_size, but a QK-norm gamma has head_dim (" +
              (config_.head_dim ? std::to_string(*config_.head_dim) : std::string("unknown")) +
              ") entries: this is a hidden-width gamma on a QK-norm, the wrong tensor");
      ok = false;
    } else if (norm.expected_width > 0 && width != norm.expected_width) {
      problem(label + ": width " + std::to_string(width) + ", expected " +
              (qk ? "head_dim " : "hidden_size ") + std::to_string(norm.expected_width));
      ok = false;
    }
  }
  if (norm.stats.nan_count > 0 || norm.stats.inf_count > 0) {
    problem(label + ": gamma has " + std::to_string(norm.stats.nan_count) + " NaN and " +
            std::to_string(norm.stats.inf_count) + " inf values (first at index " +
            std::to_string(first_bad) + ")");
    ok = false;
  }
  return ok;
}

namespace {

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A required non-negative integer of the GGUF metadata.
int64_t GgufCount(const GgufCheckpoint& g, const std::string& key, bool required) {
  const GgufValue* v = g.FindKey(key);
  if (v == nullptr) {
    if (required) throw Error(g.path() + ": " + key + " is missing from the GGUF metadata");
    return -1;
  }
  const std::optional<uint64_t> n = v->AsUint();
  if (!n || *n > (uint64_t{1} << 31)) {
    std::string what = g.path() + ": " + key + " is " + std::string(GgufValueTypeName(v->type));
    if (n) what += " " + std::to_string(*n);
    throw Error(what + ", expected a non-negative integer below 2^31");
  }
  return static_cast<int64_t>(*n);
}

}  // namespace

// The config of a GGUF checkpoint, from llama.cpp's metadata keys (what
// convert_hf_to_gguf.py writes for Glm4MoeForCausalLM): general.architecture
// "glm4moe"; ARCH.embedding_length (hidden_size); ARCH.block_count (decoder
// + NextN layers); ARCH.nextn_predict_layers; ARCH.attention.head_count;
// ARCH.attention.key_length (head_dim; llama.cpp's default when absent is
// embedding_length / head_count); ARCH.attention.layer_norm_rms_epsilon
// (FLOAT32). GGUF has no use_qk_norm: llama.cpp uses the q/k norms when the
// tensors exist, and so does this.
void CheckpointNorms::LoadGguf() {
  shards_->gguf = GgufCheckpoint::Open(dir_);
  const GgufCheckpoint& g = *shards_->gguf;
  config_source_ = BaseName(dir_);
  auto problem = [&](std::string text) { problems_.push_back(std::move(text)); };

  const GgufValue* arch_value = g.FindKey("general.architecture");
  if (arch_value == nullptr || arch_value->type != GgufValueType::kString) {
    throw Error(dir_ + ": general.architecture is " +
                (arch_value ? std::string(GgufValueTypeName(arch_value->type)) + ", expected STRING"
                            : std::string("missing from the GGUF metadata")));
  }
  const std::string arch = arch_value->string;
  config_.model_type = arch == "glm4moe" ? "glm4_moe" : arch;
  if (arch != "glm4moe") {
    problem(config_source_ + ": general.architecture is \"" + arch +
            "\", expected \"glm4moe\" (GLM-4.5, GLM-4.5-Air)");
  }
  config_.hidden_size = GgufCount(g, arch + ".embedding_length", true);
  const int64_t blocks = GgufCount(g, arch + ".block_count", true);
  const int64_t nextn = GgufCount(g, arch + ".nextn_predict_layers", false);
  config_.num_nextn_predict_layers = std::max<int64_t>(nextn, 0);
  if (config_.num_nextn_predict_layers > blocks) {
    throw Error(dir_ + ": " + arch + ".nextn_predict_layers = " + std::to_string(nextn) +
                " exceeds " + arch + ".block_count = " + std::to_string(blocks));
  }
  config_.num_hidden_layers = blocks - config_.num_nextn_predict_layers;
  const GgufValue* heads = g.FindKey(arch + ".attention.head_count");
  if (heads && heads->AsUint()) config_.num_attention_heads = static_cast<int64_t>(*heads->AsUint());
  const int64_t key_length = GgufCount(g, arch + ".attention.key_length", false);
  if (key_length >= 0) {
    config_.head_dim = key_length;
  } else if (config_.num_attention_heads > 0 &&
             config_.hidden_size % config_.num_attention_heads == 0) {
    config_.head_dim = config_.hidden_size / config_.num_attention_heads;  // llama.cpp's default
  }
  const std::string eps_key = arch + ".attention.layer_norm_rms_epsilon";
  if (const GgufValue* eps = g.FindKey(eps_key)) {
    if (eps->type != GgufValueType::kFloat32) {
      throw Error(dir_ + ": " + eps_key + " is " + std::string(GgufValueTypeName(eps->type)) +
                  ", expected FLOAT32 (llama.cpp refuses the file)");
    }
    config_.rms_norm_eps = *eps->AsFloat();
  }
  for (const std::string& name : g.TensorNames()) {
    const std::optional<std::string> t = TransformersNormName(name);
    if (!t) continue;
    const std::optional<checkpoint::NormName> parsed = checkpoint::ParseNormName(*t);
    if (parsed && (parsed->role == NormRole::kQNorm || parsed->role == NormRole::kKNorm)) {
      config_.use_qk_norm = true;
    }
  }
  model_name_ = ModelName(config_);
  CheckConfig(eps_key, arch + ".attention.key_length");

  norms_ = checkpoint::ExpectedNorms(config_);
  for (size_t i = 0; i < norms_.size(); ++i) by_name_.emplace(norms_[i].name, i);

  for (NormTensor& norm : norms_) {
    const std::string role(RoleName(norm.role));
    norm.stored_name = GgufNormName(norm.name).value_or(norm.name);
    const std::string label = norm.name + " (" + norm.stored_name + ")";
    const auto [t, file] = g.Find(norm.stored_name);
    if (t == nullptr) {
      const std::string width =
          norm.expected_width > 0 ? "[" + std::to_string(norm.expected_width) + "]" : "[head_dim]";
      problem("missing norm " + norm.name + " (" + norm.stored_name + "; " + role + ", expected " +
              width + ")");
      continue;
    }
    norm.present = true;
    norm.shard = BaseName(file->path());
    const std::optional<GgmlTypeInfo> type = GgmlType(t->type);
    norm.dtype = type ? std::string(type->name) : std::to_string(t->type);
    norm.shape = t->shape();
    norm.stored_bytes = file->Bytes(*t);
    std::optional<DType> dtype;
    if (t->type == kGgmlF32) dtype = DType::kF32;
    if (t->type == kGgmlF16) dtype = DType::kF16;
    if (t->type == kGgmlBF16) dtype = DType::kBF16;
    if (!CheckNorm(norm, file->Bytes(*t), dtype, label)) continue;
    std::vector<std::byte> copy;
    norm.gamma = file->View(*t, &copy);
    if (!copy.empty()) {
      shards_->copies.push_back(std::move(copy));
      norm.gamma.data = shards_->copies.back().data();
    }
  }

  const int64_t total_layers = config_.num_hidden_layers + config_.num_nextn_predict_layers;
  for (const std::string& name : g.TensorNames()) {
    const std::optional<std::string> t = TransformersNormName(name);
    if (!t || by_name_.count(*t)) continue;
    const std::optional<checkpoint::NormName> parsed = checkpoint::ParseNormName(*t);
    if (!parsed) continue;
    std::string why;
    if (parsed->layer >= total_layers) {
      why = "layer " + std::to_string(parsed->layer) + " is beyond " + arch +
            ".block_count = " + std::to_string(total_layers);
    } else {
      why = "not a norm of layer " + std::to_string(parsed->layer) + " in this model";
    }
    problem("unexpected norm " + name + " (" + *t + "): " + why);
  }
}

const NormTensor* CheckpointNorms::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    if (const std::optional<std::string> t = TransformersNormName(name)) it = by_name_.find(*t);
  }
  return it == by_name_.end() ? nullptr : &norms_[it->second];
}

float CheckpointNorms::eps() const {
  const std::string where = gguf_ ? dir_ : dir_ + "/" + kConfigFile;
  const std::string key = gguf_ ? "glm4moe.attention.layer_norm_rms_epsilon" : "rms_norm_eps";
  if (!config_.rms_norm_eps) {
    throw Error(where + ": " + key + " is missing; cannot apply its norms");
  }
  const double eps = *config_.rms_norm_eps;
  if (!std::isfinite(eps) || eps < 0.0 || eps > 1.0) {
    throw Error(where + ": " + key + " = " + ShortestString(eps) + " is invalid");
  }
  return static_cast<float>(eps);
}

NormOptions CheckpointNorms::Options(Rounding rounding) const {
  NormOptions options;
  options.eps = eps();
  options.rounding = rounding;
  return options;
}

ConstTensorView CheckpointNorms::Gamma(std::string_view name) const {
  const NormTensor* norm = Find(name);
  if (norm == nullptr) {
    std::string hint;
    if (name.starts_with("model.") && !name.ends_with(".weight")) {
      hint = " (norm names end in .weight, e.g. model.norm.weight)";
    }
    throw Error(dir_ + ": \"" + std::string(name) + "\" is not a norm of this " + model_name_ +
                " model" + hint);
  }
  if (!norm->usable()) {
    // Repeat the problem found for it, so the caller sees why.
    for (const std::string& p : problems_) {
      if (p.find(norm->name + ":") != std::string::npos ||
          p.find(norm->name + " (") != std::string::npos) {
        throw Error(dir_ + ": cannot use " + norm->name + ": " + p);
      }
    }
    throw Error(dir_ + ": cannot use " + norm->name);
  }
  return norm->gamma;
}

std::vector<std::string> CheckpointNorms::mapped_shards() const {
  std::vector<std::string> out;
  if (shards_->gguf) {
    for (const GgufFile& f : shards_->gguf->files()) out.push_back(BaseName(f.path()));
  }
  for (const auto& [name, file] : shards_->files) out.push_back(name);
  return out;
}

}  // namespace glmnorm
