// ResidualStream: the pre-norm residual adds and norms of a decoder step.
#include <string>
#include <utility>

#include "glmnorm/decoder.h"
#include "glmnorm/error.h"

namespace glmnorm {

LayerNorms LayerNormsOf(const CheckpointNorms& norms, int layer) {
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  LayerNorms out;
  out.input_layernorm = norms.Gamma(prefix + "input_layernorm.weight");
  out.post_attention_layernorm = norms.Gamma(prefix + "post_attention_layernorm.weight");
  if (norms.config().use_qk_norm) {
    out.q_norm = norms.Gamma(prefix + "self_attn.q_norm.weight");
    out.k_norm = norms.Gamma(prefix + "self_attn.k_norm.weight");
  }
  return out;
}

ResidualStream::ResidualStream(std::vector<LayerNorms> layers, const ConstTensorView& final_norm,
                               const NormOptions& options)
    : layers_(std::move(layers)), final_norm_(final_norm) {
  static_cast<NormOptions&>(options_) = options;
  options_.normalize_rounded_sum = true;  // what Transformers does (docs/SPEC.md §4)
  if (layers_.empty()) throw Error("ResidualStream: no decoder layers given");
  if (final_norm_.data == nullptr) throw Error("ResidualStream: final_norm has no data");
}

ResidualStream ResidualStream::FromCheckpoint(const CheckpointNorms& norms, Rounding rounding) {
  std::vector<LayerNorms> layers;
  for (int i = 0; i < static_cast<int>(norms.config().num_hidden_layers); ++i) {
    layers.push_back(LayerNormsOf(norms, i));
  }
  return ResidualStream(std::move(layers), norms.Gamma("model.norm.weight"),
                        norms.Options(rounding));
}

const LayerNorms& ResidualStream::layer(int i) const {
  if (i < 0 || i >= num_layers()) {
    throw Error("ResidualStream: layer " + std::to_string(i) + " is not in [0, " +
                std::to_string(num_layers()) + ")");
  }
  return layers_[static_cast<size_t>(i)];
}

void ResidualStream::Begin(int layer_index, const ConstTensorView& h,
                           const TensorView& attn_in) const {
  RmsNorm(h, layer(layer_index).input_layernorm, attn_in, options_);
}

void ResidualStream::AfterAttention(int layer_index, const TensorView& h,
                                    const ConstTensorView& attn_out,
                                    const TensorView& mlp_in) const {
  AddRmsNorm(h, attn_out, layer(layer_index).post_attention_layernorm, mlp_in, options_);
}

void ResidualStream::AfterMlp(int layer_index, const TensorView& h, const ConstTensorView& mlp_out,
                              const TensorView& next_in) const {
  layer(layer_index);  // range check
  const ConstTensorView& gamma = layer_index + 1 < num_layers()
                                     ? layers_[static_cast<size_t>(layer_index) + 1].input_layernorm
                                     : final_norm_;
  AddRmsNorm(h, mlp_out, gamma, next_in, options_);
}

}  // namespace glmnorm
