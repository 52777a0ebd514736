// glmnorm._glmnorm: the nanobind extension behind the Python package.
//
// The Python layer (python/glmnorm/_arrays.py) turns numpy arrays (ml_dtypes
// bf16 / e4m3 included), torch CPU tensors and other buffer / DLPack objects
// into plain view descriptors: (address, dtype code, shape, strides in
// elements). This module turns descriptors into glmnorm views and calls the
// C++ API with the GIL released. No array is copied here and nothing is
// allocated on the kernels' path: the views are stack objects.
//
// Errors: glmnorm::Error becomes ValueError, or TypeError when the message is
// about a dtype (the library names the argument and "dtype" in those).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "glmnorm/checkpoint.h"
#include "glmnorm/glmnorm.h"

namespace nb = nanobind;

namespace {

// (address, dtype code = int(glmnorm::DType), shape, strides in elements).
using Desc = std::tuple<uintptr_t, int, std::vector<int64_t>, std::vector<int64_t>>;

template <typename Ptr>
glmnorm::BasicTensorView<Ptr> ToView(const Desc& d, const char* what) {
  const auto& [addr, dtype, shape, strides] = d;
  if (shape.size() > static_cast<size_t>(glmnorm::kMaxRank) || shape.size() != strides.size()) {
    throw glmnorm::Error(std::string(what) + ": rank must be at most 4, got " +
                         std::to_string(shape.size()));
  }
  if (dtype < 0 || dtype > static_cast<int>(glmnorm::DType::kI64)) {
    throw glmnorm::Error(std::string(what) + ": unknown dtype code " + std::to_string(dtype));
  }
  glmnorm::BasicTensorView<Ptr> v;
  v.data = reinterpret_cast<Ptr>(addr);
  v.dtype = static_cast<glmnorm::DType>(dtype);
  v.rank = static_cast<int>(shape.size());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = shape[i];
    v.stride[i] = strides[i];
  }
  return v;
}

glmnorm::NormOptions Options(float eps, int rounding, float weight_offset) {
  glmnorm::NormOptions o;
  o.eps = eps;
  o.rounding = rounding == 0 ? glmnorm::Rounding::kCastThenScale : glmnorm::Rounding::kSingle;
  o.weight_offset = weight_offset;
  return o;
}

glmnorm::AddNormOptions AddOptions(float eps, int rounding, float weight_offset,
                                   bool normalize_rounded_sum) {
  glmnorm::AddNormOptions o;
  static_cast<glmnorm::NormOptions&>(o) = Options(eps, rounding, weight_offset);
  o.normalize_rounded_sum = normalize_rounded_sum;
  return o;
}

glmnorm::QuantOptions Quant(bool dynamic, float scale, const Desc& scales) {
  glmnorm::QuantOptions q;
  q.scaling = dynamic ? glmnorm::QuantScaling::kDynamicPerToken : glmnorm::QuantScaling::kStatic;
  q.scale = scale;
  if (dynamic) q.scales = ToView<void*>(scales, "scales");
  return q;
}

void RmsNorm(const Desc& x, const Desc& gamma, const Desc& y, float eps, int rounding,
             float weight_offset) {
  auto xv = ToView<const void*>(x, "x");
  auto gv = ToView<const void*>(gamma, "weight");
  auto yv = ToView<void*>(y, "out");
  auto opt = Options(eps, rounding, weight_offset);
  nb::gil_scoped_release release;
  glmnorm::RmsNorm(xv, gv, yv, opt);
}

void AddRmsNorm(const Desc& residual, const Desc& delta, const Desc& gamma, const Desc& y,
                float eps, int rounding, float weight_offset, bool normalize_rounded_sum) {
  auto rv = ToView<void*>(residual, "residual");
  auto dv = ToView<const void*>(delta, "delta");
  auto gv = ToView<const void*>(gamma, "weight");
  auto yv = ToView<void*>(y, "out");
  auto opt = AddOptions(eps, rounding, weight_offset, normalize_rounded_sum);
  nb::gil_scoped_release release;
  glmnorm::AddRmsNorm(rv, dv, gv, yv, opt);
}

void QkNorm(const Desc& qkv_in, const Desc& qkv_out, int num_q_heads, int num_k_heads,
            int num_v_heads, int head_dim, const Desc& q_gamma, const Desc& k_gamma, float eps,
            int rounding, float weight_offset, int rotary_dim, const Desc& cos, const Desc& sin,
            const Desc& positions) {
  auto in = ToView<const void*>(qkv_in, "qkv");
  auto out = ToView<void*>(qkv_out, "out");
  glmnorm::QkHeads heads;
  heads.num_q_heads = num_q_heads;
  heads.num_k_heads = num_k_heads;
  heads.num_v_heads = num_v_heads;
  heads.head_dim = head_dim;
  auto qg = ToView<const void*>(q_gamma, "q_weight");
  auto kg = ToView<const void*>(k_gamma, "k_weight");
  glmnorm::Rope rope;
  rope.rotary_dim = rotary_dim;
  if (rotary_dim != 0) {
    rope.cos = ToView<const void*>(cos, "cos");
    rope.sin = ToView<const void*>(sin, "sin");
    if (!std::get<2>(positions).empty()) {
      rope.positions = ToView<const void*>(positions, "positions");
    }
  }
  auto opt = Options(eps, rounding, weight_offset);
  nb::gil_scoped_release release;
  glmnorm::QkNorm(in, out, heads, qg, kg, opt, rope);
}

void RmsNormQuant(const Desc& x, const Desc& gamma, const Desc& q, bool dynamic, float scale,
                  const Desc& scales, float eps, int rounding, float weight_offset) {
  auto xv = ToView<const void*>(x, "x");
  auto gv = ToView<const void*>(gamma, "weight");
  auto qv = ToView<void*>(q, "out");
  auto quant = Quant(dynamic, scale, scales);
  auto opt = Options(eps, rounding, weight_offset);
  nb::gil_scoped_release release;
  glmnorm::RmsNormQuant(xv, gv, qv, quant, opt);
}

void AddRmsNormQuant(const Desc& residual, const Desc& delta, const Desc& gamma, const Desc& q,
                     bool dynamic, float scale, const Desc& scales, float eps, int rounding,
                     float weight_offset, bool normalize_rounded_sum) {
  auto rv = ToView<void*>(residual, "residual");
  auto dv = ToView<const void*>(delta, "delta");
  auto gv = ToView<const void*>(gamma, "weight");
  auto qv = ToView<void*>(q, "out");
  auto quant = Quant(dynamic, scale, scales);
  auto opt = AddOptions(eps, rounding, weight_offset, normalize_rounded_sum);
  nb::gil_scoped_release release;
  glmnorm::AddRmsNormQuant(rv, dv, gv, qv, quant, opt);
}

// The backward kernels (rms_norm_backward.h, add_rms_norm_backward.h,
// qk_norm_backward.h). Workspace: the library's per-thread arena (it grows to
// the largest call on the thread, then is reused: no allocation per call).
// An empty descriptor (rank 0) is an absent optional tensor.
void RmsNormBackward(const Desc& x, const Desc& gamma, const Desc& dy, const Desc& dx,
                     const Desc& dgamma, const Desc& rstd, float eps, int rounding,
                     float weight_offset) {
  auto xv = ToView<const void*>(x, "x");
  auto gv = ToView<const void*>(gamma, "weight");
  auto dyv = ToView<const void*>(dy, "dy");
  auto dxv = ToView<void*>(dx, "dx");
  auto dgv = ToView<void*>(dgamma, "dweight");
  auto rv = ToView<const void*>(rstd, "rstd");
  auto opt = Options(eps, rounding, weight_offset);
  nb::gil_scoped_release release;
  glmnorm::RmsNormBackward(xv, gv, dyv, dxv, dgv, opt, rv);
}

void AddRmsNormBackward(const Desc& h, const Desc& gamma, const Desc& dy,
                        const Desc& d_residual_out, const Desc& d_h, const Desc& d_delta,
                        const Desc& dgamma, const Desc& rstd, float eps, int rounding,
                        float weight_offset, bool normalize_rounded_sum) {
  auto hv = ToView<const void*>(h, "residual");
  auto gv = ToView<const void*>(gamma, "weight");
  auto dyv = ToView<const void*>(dy, "dy");
  auto drv = ToView<const void*>(d_residual_out, "d_residual_out");
  auto dhv = ToView<void*>(d_h, "d_residual");
  auto ddv = ToView<void*>(d_delta, "d_delta");
  auto dgv = ToView<void*>(dgamma, "dweight");
  auto rv = ToView<const void*>(rstd, "rstd");
  auto opt = AddOptions(eps, rounding, weight_offset, normalize_rounded_sum);
  nb::gil_scoped_release release;
  glmnorm::AddRmsNormBackward(hv, gv, dyv, drv, dhv, ddv, dgv, opt, rv);
}

void QkNormBackward(const Desc& qkv, const Desc& dqkv_out, const Desc& dqkv_in,
                    int num_q_heads, int num_k_heads, int num_v_heads, int head_dim,
                    const Desc& q_gamma, const Desc& k_gamma, const Desc& dq_gamma,
                    const Desc& dk_gamma, float eps, int rounding, float weight_offset) {
  auto in = ToView<const void*>(qkv, "qkv");
  auto dout = ToView<const void*>(dqkv_out, "dqkv_out");
  auto din = ToView<void*>(dqkv_in, "out");
  glmnorm::QkHeads heads;
  heads.num_q_heads = num_q_heads;
  heads.num_k_heads = num_k_heads;
  heads.num_v_heads = num_v_heads;
  heads.head_dim = head_dim;
  auto qg = ToView<const void*>(q_gamma, "q_weight");
  auto kg = ToView<const void*>(k_gamma, "k_weight");
  auto dqg = ToView<void*>(dq_gamma, "dq_weight");
  auto dkg = ToView<void*>(dk_gamma, "dk_weight");
  auto opt = Options(eps, rounding, weight_offset);
  nb::gil_scoped_release release;
  glmnorm::QkNormBackward(in, dout, din, heads, qg, kg, dqg, dkg, opt);
}

// The checkpoint reader. Gammas are returned as read-only numpy arrays of
// their storage type (bf16 as uint16: numpy has no bf16; the Python layer
// views them as ml_dtypes.bfloat16) that point into the mapping and keep the
// Checkpoint object alive.
struct Checkpoint {
  explicit Checkpoint(const std::string& dir) : norms(glmnorm::CheckpointNorms::Open(dir)) {}
  glmnorm::CheckpointNorms norms;
};

nb::object GammaArray(nb::handle owner, const glmnorm::ConstTensorView& g) {
  size_t shape[1] = {static_cast<size_t>(g.shape[0])};
  nb::dlpack::dtype dt;
  switch (g.dtype) {
    case glmnorm::DType::kF32: dt = nb::dtype<float>(); break;
    case glmnorm::DType::kF16: dt = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
      break;
    default: dt = nb::dtype<uint16_t>(); break;  // bf16 bits
  }
  nb::ndarray<nb::numpy, nb::ro> a(g.data, 1, shape, owner, nullptr, dt);
  return a.cast();
}

}  // namespace

NB_MODULE(_glmnorm, m) {
  m.doc() = "glmnorm's C++ kernels (internal: use the glmnorm package).";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const glmnorm::Error& e) {
      const std::string msg = e.what();
      if (msg.find("dtype") != std::string::npos) {
        PyErr_SetString(PyExc_TypeError, msg.c_str());
      } else {
        PyErr_SetString(PyExc_ValueError, msg.c_str());
      }
    }
  });

  m.def("rms_norm", &RmsNorm);
  m.def("add_rms_norm", &AddRmsNorm);
  m.def("qk_norm", &QkNorm);
  m.def("rms_norm_quant", &RmsNormQuant);
  m.def("add_rms_norm_quant", &AddRmsNormQuant);
  m.def("rms_norm_backward", &RmsNormBackward);
  m.def("add_rms_norm_backward", &AddRmsNormBackward);
  m.def("qk_norm_backward", &QkNormBackward);
  m.def("set_num_threads", [](int n) { glmnorm::SetNumThreads(n); });
  m.def("num_threads", [] { return glmnorm::NumThreads(); });
  m.def("dtype_names", [] {
    std::vector<std::string> names;
    for (int i = 0; i <= static_cast<int>(glmnorm::DType::kI64); ++i) {
      names.emplace_back(glmnorm::Name(static_cast<glmnorm::DType>(i)));
    }
    return names;
  });

  nb::class_<Checkpoint>(m, "Checkpoint")
      .def(nb::init<const std::string&>(), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("dir", [](const Checkpoint& c) { return c.norms.dir(); })
      .def_prop_ro("model_name", [](const Checkpoint& c) { return c.norms.model_name(); })
      .def_prop_ro("model_type", [](const Checkpoint& c) { return c.norms.config().model_type; })
      .def_prop_ro("hidden_size", [](const Checkpoint& c) { return c.norms.config().hidden_size; })
      .def_prop_ro("use_qk_norm", [](const Checkpoint& c) { return c.norms.config().use_qk_norm; })
      .def_prop_ro("problems", [](const Checkpoint& c) { return c.norms.problems(); })
      .def_prop_ro("mapped_shards", [](const Checkpoint& c) { return c.norms.mapped_shards(); })
      .def("eps", [](const Checkpoint& c) { return c.norms.eps(); })
      // One tuple per expected norm: (name, role, layer, expected_width, present,
      // shard, dtype, shape, usable).
      .def("norms",
           [](const Checkpoint& c) {
             nb::list out;
             for (const glmnorm::NormTensor& n : c.norms.norms()) {
               out.append(nb::make_tuple(n.name, std::string(glmnorm::RoleName(n.role)), n.layer,
                                         n.expected_width, n.present, n.shard, n.dtype, n.shape,
                                         n.usable()));
             }
             return out;
           })
      // (array, dtype name) of a usable norm's gamma; raises ValueError otherwise.
      .def("gamma", [](nb::pointer_and_handle<Checkpoint> self, const std::string& name) {
        glmnorm::ConstTensorView g = self.p->norms.Gamma(name);
        return nb::make_tuple(GammaArray(self.h, g), std::string(glmnorm::Name(g.dtype)));
      });
}
