// glmnorm._glmnorm: the nanobind extension behind the Python package.
//
// The Python layer (python/glmnorm/_arrays.py) turns numpy arrays (ml_dtypes
// bf16 / e4m3 included), torch CPU tensors and other buffer / DLPack objects
// into plain view descriptors: (address, dtype code, shape, strides in
// elements). This module turns descriptors into glmnorm views and calls the
// C++ API with the GIL released. No array is copied here and nothing is
// allocated on the kernels' path: the views are stack objects.
//
// Errors: glmnorm::Error becomes ValueError, or TypeError for
// glmnorm::DTypeError. Scalars are converted here with errors naming the Python
// function and argument. The module links libglmnorm.so, the package's one
// copy of the kernels (shared with libglmnorm_torch: one thread pool).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <climits>
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

// Scalar arguments arrive as Python objects and are converted here, so that
// a wrong type is a TypeError naming the function and the argument (not
// nanobind's signature dump) and an int out of range a ValueError (not a
// narrowing cast). `fn` is the Python function ("glmnorm.rms_norm").
double Float(const char* fn, const char* name, nb::handle h) {
  if (!PyFloat_Check(h.ptr()) && !PyLong_Check(h.ptr())) {
    throw nb::type_error((std::string(fn) + ": " + name + " must be a float, got " +
                          nb::inst_name(h).c_str()).c_str());
  }
  return PyFloat_AsDouble(h.ptr());
}

int Int(const char* fn, const char* name, nb::handle h) {
  if (!PyLong_Check(h.ptr()) || PyBool_Check(h.ptr())) {
    throw nb::type_error((std::string(fn) + ": " + name + " must be an int, got " +
                          nb::inst_name(h).c_str()).c_str());
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow != 0 || v < INT32_MIN || v > INT32_MAX) {
    throw nb::value_error((std::string(fn) + ": " + name + " must fit in 32 bits, got " +
                           nb::str(h).c_str()).c_str());
  }
  return static_cast<int>(v);
}

bool Bool(const char* fn, const char* name, nb::handle h) {
  if (!PyBool_Check(h.ptr())) {
    throw nb::type_error((std::string(fn) + ": " + name + " must be a bool, got " +
                          nb::inst_name(h).c_str()).c_str());
  }
  return h.ptr() == Py_True;
}

glmnorm::Rounding RoundingOf(const char* fn, nb::handle h) {
  if (!PyUnicode_Check(h.ptr())) {
    throw nb::type_error((std::string(fn) + ": rounding must be a str ('cast-then-scale' or "
                          "'single'), got " + nb::inst_name(h).c_str()).c_str());
  }
  try {
    return glmnorm::RoundingFromName(nb::cast<std::string>(h));
  } catch (const glmnorm::Error& e) {
    throw nb::value_error((std::string(fn) + ": " + e.what()).c_str());
  }
}

// (eps, rounding, weight_offset) of every norm.
glmnorm::NormOptions Options(const char* fn, nb::handle eps, nb::handle rounding,
                             nb::handle weight_offset) {
  glmnorm::NormOptions o;
  o.eps = static_cast<float>(Float(fn, "eps", eps));
  o.rounding = RoundingOf(fn, rounding);
  o.weight_offset = static_cast<float>(Float(fn, "weight_offset", weight_offset));
  return o;
}

glmnorm::AddNormOptions AddOptions(const char* fn, nb::handle eps, nb::handle rounding,
                                   nb::handle weight_offset, nb::handle normalize_rounded_sum) {
  glmnorm::AddNormOptions o;
  static_cast<glmnorm::NormOptions&>(o) = Options(fn, eps, rounding, weight_offset);
  o.normalize_rounded_sum = Bool(fn, "normalize_rounded_sum", normalize_rounded_sum);
  return o;
}

glmnorm::QuantOptions Quant(const char* fn, nb::handle scale, const Desc& scales) {
  glmnorm::QuantOptions q;
  if (scale.is_none()) {
    q.scaling = glmnorm::QuantScaling::kDynamicPerToken;
    q.scales = ToView<void*>(scales, "scales");
  } else {
    q.scaling = glmnorm::QuantScaling::kStatic;
    q.scale = static_cast<float>(Float(fn, "scale", scale));
  }
  return q;
}

glmnorm::QkHeads Heads(const char* fn, nb::handle nq, nb::handle nk, nb::handle nv,
                       nb::handle head_dim) {
  glmnorm::QkHeads heads;
  heads.num_q_heads = Int(fn, "num_q_heads", nq);
  heads.num_k_heads = Int(fn, "num_k_heads", nk);
  heads.num_v_heads = Int(fn, "num_v_heads", nv);
  heads.head_dim = Int(fn, "head_dim", head_dim);
  return heads;
}

using H = nb::handle;

// Runs a library call with the GIL released; its errors get the Python
// function's name in front (kind kept).
template <typename F>
void Run(const char* fn, F&& call) {
  try {
    nb::gil_scoped_release release;
    call();
  } catch (const glmnorm::DTypeError& e) {
    throw glmnorm::DTypeError(std::string(fn) + ": " + e.what());
  } catch (const glmnorm::Error& e) {
    throw glmnorm::Error(std::string(fn) + ": " + e.what());
  }
}

void RmsNorm(const Desc& x, const Desc& gamma, const Desc& y, H eps, H rounding,
             H weight_offset) {
  auto opt = Options("glmnorm.rms_norm", eps, rounding, weight_offset);
  auto xv = ToView<const void*>(x, "x");
  auto gv = ToView<const void*>(gamma, "weight");
  auto yv = ToView<void*>(y, "out");
  Run("glmnorm.rms_norm", [&] { glmnorm::RmsNorm(xv, gv, yv, opt); });
}

void AddRmsNorm(const Desc& residual, const Desc& delta, const Desc& gamma, const Desc& y,
                H eps, H rounding, H weight_offset, H normalize_rounded_sum) {
  auto opt = AddOptions("glmnorm.add_rms_norm", eps, rounding, weight_offset,
                        normalize_rounded_sum);
  auto rv = ToView<void*>(residual, "residual");
  auto dv = ToView<const void*>(delta, "delta");
  auto gv = ToView<const void*>(gamma, "weight");
  auto yv = ToView<void*>(y, "out");
  Run("glmnorm.add_rms_norm", [&] { glmnorm::AddRmsNorm(rv, dv, gv, yv, opt); });
}

void QkNorm(const Desc& qkv_in, const Desc& qkv_out, H num_q_heads, H num_k_heads,
            H num_v_heads, H head_dim, const Desc& q_gamma, const Desc& k_gamma, H eps,
            H rounding, H weight_offset, H rotary_dim, const Desc& cos, const Desc& sin,
            const Desc& positions) {
  constexpr const char* kFn = "glmnorm.qk_norm";
  const glmnorm::QkHeads heads = Heads(kFn, num_q_heads, num_k_heads, num_v_heads, head_dim);
  auto opt = Options(kFn, eps, rounding, weight_offset);
  glmnorm::Rope rope;
  rope.rotary_dim = Int(kFn, "rotary_dim", rotary_dim);
  auto in = ToView<const void*>(qkv_in, "qkv");
  auto out = ToView<void*>(qkv_out, "out");
  auto qg = ToView<const void*>(q_gamma, "q_weight");
  auto kg = ToView<const void*>(k_gamma, "k_weight");
  if (rope.rotary_dim != 0) {
    rope.cos = ToView<const void*>(cos, "cos");
    rope.sin = ToView<const void*>(sin, "sin");
    if (!std::get<2>(positions).empty()) {
      rope.positions = ToView<const void*>(positions, "positions");
    }
  }
  Run(kFn, [&] { glmnorm::QkNorm(in, out, heads, qg, kg, opt, rope); });
}

void RmsNormQuant(const Desc& x, const Desc& gamma, const Desc& q, H scale, const Desc& scales,
                  H eps, H rounding, H weight_offset) {
  constexpr const char* kFn = "glmnorm.rms_norm_quant";
  auto opt = Options(kFn, eps, rounding, weight_offset);
  auto quant = Quant(kFn, scale, scales);
  auto xv = ToView<const void*>(x, "x");
  auto gv = ToView<const void*>(gamma, "weight");
  auto qv = ToView<void*>(q, "out");
  Run(kFn, [&] { glmnorm::RmsNormQuant(xv, gv, qv, quant, opt); });
}

void AddRmsNormQuant(const Desc& residual, const Desc& delta, const Desc& gamma, const Desc& q,
                     H scale, const Desc& scales, H eps, H rounding, H weight_offset,
                     H normalize_rounded_sum) {
  constexpr const char* kFn = "glmnorm.add_rms_norm_quant";
  auto opt = AddOptions(kFn, eps, rounding, weight_offset, normalize_rounded_sum);
  auto quant = Quant(kFn, scale, scales);
  auto rv = ToView<void*>(residual, "residual");
  auto dv = ToView<const void*>(delta, "delta");
  auto gv = ToView<const void*>(gamma, "weight");
  auto qv = ToView<void*>(q, "out");
  Run(kFn, [&] { glmnorm::AddRmsNormQuant(rv, dv, gv, qv, quant, opt); });
}

// The backward kernels (rms_norm_backward.h, add_rms_norm_backward.h,
// qk_norm_backward.h). Workspace: the library's per-thread arena (it grows to
// the largest call on the thread, then is reused: no allocation per call).
// An empty descriptor (rank 0) is an absent optional tensor.
void RmsNormBackward(const Desc& x, const Desc& gamma, const Desc& dy, const Desc& dx,
                     const Desc& dgamma, const Desc& rstd, H eps, H rounding,
                     H weight_offset) {
  auto opt = Options("glmnorm.rms_norm_backward", eps, rounding, weight_offset);
  auto xv = ToView<const void*>(x, "x");
  auto gv = ToView<const void*>(gamma, "weight");
  auto dyv = ToView<const void*>(dy, "dy");
  auto dxv = ToView<void*>(dx, "dx");
  auto dgv = ToView<void*>(dgamma, "dweight");
  auto rv = ToView<const void*>(rstd, "rstd");
  Run("glmnorm.rms_norm_backward", [&] { glmnorm::RmsNormBackward(xv, gv, dyv, dxv, dgv, opt, rv); });
}

void AddRmsNormBackward(const Desc& h, const Desc& gamma, const Desc& dy,
                        const Desc& d_residual_out, const Desc& d_h, const Desc& d_delta,
                        const Desc& dgamma, const Desc& rstd, H eps, H rounding,
                        H weight_offset, H normalize_rounded_sum) {
  auto opt = AddOptions("glmnorm.add_rms_norm_backward", eps, rounding, weight_offset,
                        normalize_rounded_sum);
  auto hv = ToView<const void*>(h, "residual");
  auto gv = ToView<const void*>(gamma, "weight");
  auto dyv = ToView<const void*>(dy, "dy");
  auto drv = ToView<const void*>(d_residual_out, "d_residual_out");
  auto dhv = ToView<void*>(d_h, "d_residual");
  auto ddv = ToView<void*>(d_delta, "d_delta");
  auto dgv = ToView<void*>(dgamma, "dweight");
  auto rv = ToView<const void*>(rstd, "rstd");
  Run("glmnorm.add_rms_norm_backward", [&] { glmnorm::AddRmsNormBackward(hv, gv, dyv, drv, dhv, ddv, dgv, opt, rv); });
}

void QkNormBackward(const Desc& qkv, const Desc& dqkv_out, const Desc& dqkv_in,
                    H num_q_heads, H num_k_heads, H num_v_heads, H head_dim,
                    const Desc& q_gamma, const Desc& k_gamma, const Desc& dq_gamma,
                    const Desc& dk_gamma, H eps, H rounding, H weight_offset) {
  constexpr const char* kFn = "glmnorm.qk_norm_backward";
  const glmnorm::QkHeads heads = Heads(kFn, num_q_heads, num_k_heads, num_v_heads, head_dim);
  auto opt = Options(kFn, eps, rounding, weight_offset);
  auto in = ToView<const void*>(qkv, "qkv");
  auto dout = ToView<const void*>(dqkv_out, "dqkv_out");
  auto din = ToView<void*>(dqkv_in, "out");
  auto qg = ToView<const void*>(q_gamma, "q_weight");
  auto kg = ToView<const void*>(k_gamma, "k_weight");
  auto dqg = ToView<void*>(dq_gamma, "dq_weight");
  auto dkg = ToView<void*>(dk_gamma, "dk_weight");
  Run(kFn, [&] { glmnorm::QkNormBackward(in, dout, din, heads, qg, kg, dqg, dkg, opt); });
}

// The dtype code of a new output of `op` given the dtype codes of its tensor
// arguments (the library's rule): "rms_norm" (x, weight), "add_rms_norm"
// (residual, delta, weight). A code that is not a float activation gives
// f32 (the call itself then reports the dtype).
int OutputDType(const std::string& op, const std::vector<int>& codes, H rounding) {
  const glmnorm::Rounding r = RoundingOf(("glmnorm." + op).c_str(), rounding);
  std::vector<glmnorm::DType> d;
  for (int c : codes) {
    d.push_back(c >= 0 && c <= static_cast<int>(glmnorm::DType::kF16)
                    ? static_cast<glmnorm::DType>(c) : glmnorm::DType::kF32);
  }
  if (op == "rms_norm" && d.size() == 2) {
    return static_cast<int>(glmnorm::RmsNormOutputDType(d[0], d[1], r));
  }
  if (op == "add_rms_norm" && d.size() == 3) {
    return static_cast<int>(glmnorm::AddRmsNormOutputDType(d[0], d[1], d[2], r));
  }
  throw nb::value_error(("output_dtype: unknown op or arity: " + op).c_str());
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
      PyErr_SetString(dynamic_cast<const glmnorm::DTypeError*>(&e) != nullptr
                          ? PyExc_TypeError : PyExc_ValueError,
                      e.what());
    }
  });

  m.def("rms_norm", &RmsNorm);
  m.def("add_rms_norm", &AddRmsNorm);
  m.def("qk_norm", &QkNorm);
  // scale may be None (dynamic per-token scales): nanobind refuses None unless told.
  m.def("rms_norm_quant", &RmsNormQuant, nb::arg("x"), nb::arg("weight"), nb::arg("out"),
        nb::arg("scale").none(), nb::arg("scales"), nb::arg("eps"), nb::arg("rounding"),
        nb::arg("weight_offset"));
  m.def("add_rms_norm_quant", &AddRmsNormQuant, nb::arg("residual"), nb::arg("delta"),
        nb::arg("weight"), nb::arg("out"), nb::arg("scale").none(), nb::arg("scales"),
        nb::arg("eps"), nb::arg("rounding"), nb::arg("weight_offset"),
        nb::arg("normalize_rounded_sum"));
  m.def("rms_norm_backward", &RmsNormBackward);
  m.def("add_rms_norm_backward", &AddRmsNormBackward);
  m.def("qk_norm_backward", &QkNormBackward);
  m.def("output_dtype", &OutputDType);
  m.def("set_num_threads", [](H n) { glmnorm::SetNumThreads(Int("glmnorm.set_num_threads", "n", n)); });
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
