// The norms of GLM-4.5's residual stream, one decoder step at a time
// (pre-norm, docs/SPEC.md §4), around the caller's own attention and MLP:
//
//   step                      residual stream h (caller's buffer, in place)
//   Begin(0)                  attn_in = input_layernorm_0(h)
//   [caller]                  attn_out = self_attn(attn_in)
//   AfterAttention(i)         h = h + attn_out;  mlp_in = post_attention_layernorm_i(h)
//   [caller]                  mlp_out = mlp(mlp_in)
//   AfterMlp(i)               h = h + mlp_out;   next = input_layernorm_{i+1}(h),
//                                                or model.norm(h) after the last layer
//
// Each add is fused with the norm that follows it (AddRmsNorm: one pass over
// memory). The add rounds to h's dtype and the norm reads that ROUNDED sum,
// exactly as Transformers' Glm4MoeDecoderLayer does. No call allocates.
#ifndef GLMNORM_DECODER_H_
#define GLMNORM_DECODER_H_

#include <vector>

#include "glmnorm/add_rms_norm.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/tensor.h"

namespace glmnorm {

// The gammas of one decoder layer.
struct LayerNorms {
  ConstTensorView input_layernorm;           // [hidden]
  ConstTensorView post_attention_layernorm;  // [hidden]
  ConstTensorView q_norm;                    // [head_dim]; data == nullptr without QK-norm
  ConstTensorView k_norm;                    // [head_dim]; data == nullptr without QK-norm
};

// The norms of decoder layer `layer` of a checkpoint (MTP layers included:
// layer >= num_hidden_layers). Throws glmnorm::Error when one of them is
// missing or failed its checks.
LayerNorms LayerNormsOf(const CheckpointNorms& norms, int layer);

class ResidualStream {
 public:
  // `layers` in model order and model.norm's gamma; the views must outlive
  // this object. options.eps must be the checkpoint's rms_norm_eps.
  ResidualStream(std::vector<LayerNorms> layers, const ConstTensorView& final_norm,
                 const NormOptions& options);
  // The decoder layers of a checkpoint (not its MTP layers), with its eps.
  static ResidualStream FromCheckpoint(const CheckpointNorms& norms,
                                       Rounding rounding = Rounding::kCastThenScale);

  int num_layers() const { return static_cast<int>(layers_.size()); }
  const LayerNorms& layer(int i) const;  // throws for a bad index
  const NormOptions& options() const { return options_; }

  // attn_in = input_layernorm_layer(h). Needed for layer 0 only: AfterMlp
  // produces the input of every later layer.
  void Begin(int layer, const ConstTensorView& h, const TensorView& attn_in) const;
  // h = h + attn_out (rounded to h's dtype); mlp_in = post_attention_layernorm_layer(h).
  // mlp_in may be attn_out (in place).
  void AfterAttention(int layer, const TensorView& h, const ConstTensorView& attn_out,
                      const TensorView& mlp_in) const;
  // h = h + mlp_out; next_in = input_layernorm_{layer+1}(h), or model.norm(h)
  // when `layer` is the last one. next_in may be mlp_out (in place).
  void AfterMlp(int layer, const TensorView& h, const ConstTensorView& mlp_out,
                const TensorView& next_in) const;

 private:
  std::vector<LayerNorms> layers_;
  ConstTensorView final_norm_;
  AddNormOptions options_;
};

}  // namespace glmnorm

#endif  // GLMNORM_DECODER_H_
