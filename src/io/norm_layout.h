// Which RMSNorm tensors a glm4_moe model has (docs/SPEC.md §5), by config alone.
#ifndef GLMNORM_CHECKPOINT_NORM_LAYOUT_H_
#define GLMNORM_CHECKPOINT_NORM_LAYOUT_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "glmnorm/checkpoint.h"

namespace glmnorm::checkpoint {

// Every norm the config implies, in model order: per decoder layer
// input_layernorm, post_attention_layernorm (+ q_norm, k_norm when
// use_qk_norm); model.norm; then per MTP layer enorm, hnorm,
// shared_head.norm and its own block (and q/k) norms. Fields beyond name,
// role, layer and expected_width are left empty.
std::vector<NormTensor> ExpectedNorms(const ModelConfig& config);

// The role and layer of a tensor name that has the form of a norm
// (".../input_layernorm.weight", ".../q_norm.weight", "model.norm.weight",
// ...), whether or not this model should have it; nullopt otherwise.
struct NormName {
  NormRole role;
  int layer;  // -1 for model.norm
};
std::optional<NormName> ParseNormName(std::string_view name);

}  // namespace glmnorm::checkpoint

#endif  // GLMNORM_CHECKPOINT_NORM_LAYOUT_H_
