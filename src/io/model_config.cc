// config.json: the fields the norms of a glm4_moe model depend on.
#include <cmath>

#include "io/json_util.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"

namespace glmnorm {
namespace {

using nlohmann::json;

// Largest values accepted: far above any real model, small enough that
// products stay in 64 bits and a hostile config cannot make the norm list huge.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;

int64_t GetSize(const json& config, const char* key, const std::string& label, bool required,
                int64_t min_value, int64_t max_value = kMaxDim) {
  if (!config.contains(key) || config[key].is_null()) {
    if (required) throw Error(label + ": required field " + key + " is missing");
    return 0;
  }
  const json& v = config[key];
  if (!v.is_number_integer()) {
    throw Error(label + ": " + key + " must be an integer, got " + checkpoint::Excerpt(v));
  }
  const int64_t n = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max_value)
                        ? max_value + 1
                        : v.get<int64_t>();
  if (n < min_value || n > max_value) {
    throw Error(label + ": " + key + " = " + checkpoint::Excerpt(v) + " is out of range [" +
                std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  }
  return n;
}

}  // namespace

ModelConfig ParseModelConfig(std::string_view json_text, const std::string& label) {
  // config.json nests rope_scaling / quantization_config a few levels deep.
  const json config = checkpoint::ParseStrictJson(json_text, label, /*max_depth=*/32);
  if (!config.is_object()) throw Error(label + ": not a JSON object");
  ModelConfig c;
  if (config.contains("model_type")) {
    if (!config["model_type"].is_string()) throw Error(label + ": model_type is not a string");
    c.model_type = config["model_type"].get<std::string>();
  }
  c.hidden_size = GetSize(config, "hidden_size", label, true, 1);
  c.num_hidden_layers = GetSize(config, "num_hidden_layers", label, true, 0, kMaxLayers);
  c.num_attention_heads = GetSize(config, "num_attention_heads", label, false, 1);
  if (config.contains("head_dim") && !config["head_dim"].is_null()) {
    c.head_dim = GetSize(config, "head_dim", label, true, 1);
  }
  c.num_nextn_predict_layers =
      GetSize(config, "num_nextn_predict_layers", label, false, 0, kMaxLayers);
  if (config.contains("use_qk_norm") && !config["use_qk_norm"].is_null()) {
    if (!config["use_qk_norm"].is_boolean()) {
      throw Error(label + ": use_qk_norm must be true or false, got " +
                  checkpoint::Excerpt(config["use_qk_norm"]));
    }
    c.use_qk_norm = config["use_qk_norm"].get<bool>();
  }
  if (config.contains("rms_norm_eps") && !config["rms_norm_eps"].is_null()) {
    const json& e = config["rms_norm_eps"];
    if (!e.is_number()) {
      throw Error(label + ": rms_norm_eps must be a number, got " + checkpoint::Excerpt(e));
    }
    c.rms_norm_eps = e.get<double>();
  }
  return c;
}

}  // namespace glmnorm
