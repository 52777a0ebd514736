#include "io/norm_layout.h"

#include <charconv>

namespace glmnorm::checkpoint {
namespace {

struct Suffix {
  std::string_view text;
  NormRole role;
};
constexpr Suffix kLayerNorms[] = {
    {"input_layernorm.weight", NormRole::kInputLayernorm},
    {"post_attention_layernorm.weight", NormRole::kPostAttentionLayernorm},
    {"self_attn.q_norm.weight", NormRole::kQNorm},
    {"self_attn.k_norm.weight", NormRole::kKNorm},
    {"enorm.weight", NormRole::kMtpENorm},
    {"hnorm.weight", NormRole::kMtpHNorm},
    {"shared_head.norm.weight", NormRole::kMtpSharedHeadNorm},
};

NormTensor Make(NormRole role, int layer, int64_t width) {
  NormTensor n;
  n.role = role;
  n.layer = layer;
  n.expected_width = width;
  if (role == NormRole::kFinalNorm) {
    n.name = "model.norm.weight";
  } else {
    for (const Suffix& s : kLayerNorms) {
      if (s.role == role)
        n.name = "model.layers." + std::to_string(layer) + "." + std::string(s.text);
    }
  }
  return n;
}

}  // namespace

std::vector<NormTensor> ExpectedNorms(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size;
  const int64_t head_dim = c.head_dim.value_or(0);
  std::vector<NormTensor> out;
  auto block = [&](int layer) {
    out.push_back(Make(NormRole::kInputLayernorm, layer, hidden));
    out.push_back(Make(NormRole::kPostAttentionLayernorm, layer, hidden));
    if (c.use_qk_norm) {
      out.push_back(Make(NormRole::kQNorm, layer, head_dim));
      out.push_back(Make(NormRole::kKNorm, layer, head_dim));
    }
  };
  const int layers = static_cast<int>(c.num_hidden_layers);
  for (int i = 0; i < layers; ++i) block(i);
  out.push_back(Make(NormRole::kFinalNorm, -1, hidden));
  for (int m = 0; m < static_cast<int>(c.num_nextn_predict_layers); ++m) {
    const int layer = layers + m;
    out.push_back(Make(NormRole::kMtpENorm, layer, hidden));
    out.push_back(Make(NormRole::kMtpHNorm, layer, hidden));
    out.push_back(Make(NormRole::kMtpSharedHeadNorm, layer, hidden));
    block(layer);
  }
  return out;
}

std::optional<NormName> ParseNormName(std::string_view name) {
  if (name == "model.norm.weight") return NormName{NormRole::kFinalNorm, -1};
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  int layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() || *end != '.' || layer < 0) return std::nullopt;
  name.remove_prefix(static_cast<size_t>(end - name.data()) + 1);
  for (const Suffix& s : kLayerNorms) {
    if (name == s.text) return NormName{s.role, layer};
  }
  return std::nullopt;
}

}  // namespace glmnorm::checkpoint
