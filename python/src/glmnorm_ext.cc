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

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

#include "glmnorm/checkpoint.h"
#include "glmnorm/glmnorm.h"
#include "glmnorm/output_cache.h"
#include "messages.h"

namespace nb = nanobind;

namespace {

// (address, dtype code = int(glmnorm::DType), shape, strides in elements).
using Desc = std::tuple<uintptr_t, int, std::vector<int64_t>, std::vector<int64_t>>;

// The view of argument `what` of Python function `fn`. Rank is the library's
// to check (1..4); a rank the view cannot even hold is reported here.
template <typename Ptr>
glmnorm::BasicTensorView<Ptr> ToView(const char* fn, const Desc& d, const char* what) {
  const auto& [addr, dtype, shape, strides] = d;
  if (shape.size() > static_cast<size_t>(glmnorm::kMaxRank) || shape.size() != strides.size()) {
    throw nb::value_error((std::string(fn) + ": " + what + ": rank must be 1..4, got " +
                           std::to_string(shape.size())).c_str());
  }
  if (dtype < 0 || dtype > static_cast<int>(glmnorm::DType::kI64)) {
    throw nb::value_error((std::string(fn) + ": " + what + ": unknown dtype code " +
                           std::to_string(dtype)).c_str());
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

// Runs f (a library call, or a rule of the library's); a glmnorm::Error it
// throws is reworded for the Python caller (messages.h: the Python function
// and argument names), its kind kept.
template <typename F>
auto Named(const char* fn, F&& f, std::initializer_list<glmnorm_python::Rename> renames = {}) {
  try {
    return f();
  } catch (const glmnorm::DTypeError& e) {
    throw glmnorm::DTypeError(glmnorm_python::PythonMessage(fn, e.what(), renames));
  } catch (const glmnorm::Error& e) {
    throw glmnorm::Error(glmnorm_python::PythonMessage(fn, e.what(), renames));
  }
}

// Scalar arguments arrive as Python objects and are converted here, so that
// a wrong type is a TypeError naming the function and the argument (not
// nanobind's signature dump); the range is the library's rule
// (Float32Argument, Int32Argument: refused, not narrowed). `fn` is the
// Python function ("glmnorm.rms_norm").
[[noreturn]] void WrongType(const char* fn, const char* name, const char* expected, nb::handle h) {
  throw nb::type_error((std::string(fn) + ": " + name + " must be " + expected + ", got " +
                        nb::inst_name(h).c_str()).c_str());
}

float Float(const char* fn, const char* name, nb::handle h) {
  if ((!PyFloat_Check(h.ptr()) && !PyLong_Check(h.ptr())) || PyBool_Check(h.ptr())) {
    WrongType(fn, name, "a float", h);
  }
  const double v = PyFloat_AsDouble(h.ptr());
  if (v == -1.0 && PyErr_Occurred()) {  // an int past double's range: past float32's as well
    PyErr_Clear();
    throw nb::value_error((std::string(fn) + ": " + name + " must fit in float32, got " +
                           nb::str(h).c_str()).c_str());
  }
  return Named(fn, [&] { return glmnorm::Float32Argument(name, v); });
}

int Int(const char* fn, const char* name, nb::handle h) {
  if (!PyLong_Check(h.ptr()) || PyBool_Check(h.ptr())) {
    WrongType(fn, name, "an int", h);
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow != 0) {  // past int64: the library's rule cannot even be given the value
    throw nb::value_error((std::string(fn) + ": " + name + " must fit in 32 bits, got " +
                           nb::str(h).c_str()).c_str());
  }
  return Named(fn, [&] { return glmnorm::Int32Argument(name, v); });
}

bool Bool(const char* fn, const char* name, nb::handle h) {
  if (!PyBool_Check(h.ptr())) {
    WrongType(fn, name, "a bool", h);
  }
  return h.ptr() == Py_True;
}

glmnorm::Rounding RoundingOf(const char* fn, nb::handle h) {
  if (!PyUnicode_Check(h.ptr())) {
    WrongType(fn, "rounding", "a str ('cast-then-scale' or 'single')", h);
  }
  return Named(fn, [&] { return glmnorm::RoundingFromName(nb::cast<std::string>(h)); });
}

// (eps, rounding, weight_offset) of every norm.
glmnorm::NormOptions Options(const char* fn, nb::handle eps, nb::handle rounding,
                             nb::handle weight_offset) {
  glmnorm::NormOptions o;
  o.eps = Float(fn, "eps", eps);
  o.rounding = RoundingOf(fn, rounding);
  o.weight_offset = Float(fn, "weight_offset", weight_offset);
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
    q.scales = ToView<void*>(fn, scales, "scales");
  } else {
    q.scaling = glmnorm::QuantScaling::kStatic;
    q.scale = Float(fn, "scale", scale);
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

// The Rope argument of the QK functions: rotary_dim 0 leaves the tables unread
// (the Python layer passes empty descriptors); an empty positions is absent.
glmnorm::Rope RopeOf(const char* fn, H rotary_dim, const Desc& cos, const Desc& sin,
                     const Desc& positions) {
  glmnorm::Rope rope;
  rope.rotary_dim = Int(fn, "rotary_dim", rotary_dim);
  if (rope.rotary_dim != 0) {
    rope.cos = ToView<const void*>(fn, cos, "cos");
    rope.sin = ToView<const void*>(fn, sin, "sin");
    if (!std::get<2>(positions).empty()) {
      rope.positions = ToView<const void*>(fn, positions, "positions");
    }
  }
  return rope;
}

// Runs a library call with the GIL released (errors as Named).
template <typename F>
void Run(const char* fn, F&& call, std::initializer_list<glmnorm_python::Rename> renames = {}) {
  Named(fn, [&] {
    nb::gil_scoped_release release;
    call();
  }, renames);
}

void RmsNorm(const Desc& x, const Desc& gamma, const Desc& y, H eps, H rounding,
             H weight_offset) {
  constexpr const char* kFn = "glmnorm.rms_norm";
  auto opt = Options(kFn, eps, rounding, weight_offset);
  auto xv = ToView<const void*>(kFn, x, "x");
  auto gv = ToView<const void*>(kFn, gamma, "weight");
  auto yv = ToView<void*>(kFn, y, "out");
  Run(kFn, [&] { glmnorm::RmsNorm(xv, gv, yv, opt); });
}

void AddRmsNorm(const Desc& residual, const Desc& delta, const Desc& gamma, const Desc& y,
                H eps, H rounding, H weight_offset, H normalize_rounded_sum) {
  constexpr const char* kFn = "glmnorm.add_rms_norm";
  auto opt = AddOptions(kFn, eps, rounding, weight_offset,
                        normalize_rounded_sum);
  auto rv = ToView<void*>(kFn, residual, "residual");
  auto dv = ToView<const void*>(kFn, delta, "delta");
  auto gv = ToView<const void*>(kFn, gamma, "weight");
  auto yv = ToView<void*>(kFn, y, "out");
  Run(kFn, [&] { glmnorm::AddRmsNorm(rv, dv, gv, yv, opt); });
}

void QkNorm(const Desc& qkv_in, const Desc& qkv_out, H num_q_heads, H num_k_heads,
            H num_v_heads, H head_dim, const Desc& q_gamma, const Desc& k_gamma, H eps,
            H rounding, H weight_offset, H rotary_dim, const Desc& cos, const Desc& sin,
            const Desc& positions) {
  constexpr const char* kFn = "glmnorm.qk_norm";
  const glmnorm::QkHeads heads = Heads(kFn, num_q_heads, num_k_heads, num_v_heads, head_dim);
  auto opt = Options(kFn, eps, rounding, weight_offset);
  const glmnorm::Rope rope = RopeOf(kFn, rotary_dim, cos, sin, positions);
  auto in = ToView<const void*>(kFn, qkv_in, "qkv");
  auto out = ToView<void*>(kFn, qkv_out, "out");
  auto qg = ToView<const void*>(kFn, q_gamma, "q_weight");
  auto kg = ToView<const void*>(kFn, k_gamma, "k_weight");
  Run(kFn, [&] { glmnorm::QkNorm(in, out, heads, qg, kg, opt, rope); });
}

void RmsNormQuant(const Desc& x, const Desc& gamma, const Desc& q, H scale, const Desc& scales,
                  H eps, H rounding, H weight_offset) {
  constexpr const char* kFn = "glmnorm.rms_norm_quant";
  auto opt = Options(kFn, eps, rounding, weight_offset);
  auto quant = Quant(kFn, scale, scales);
  auto xv = ToView<const void*>(kFn, x, "x");
  auto gv = ToView<const void*>(kFn, gamma, "weight");
  auto qv = ToView<void*>(kFn, q, "out");
  Run(kFn, [&] { glmnorm::RmsNormQuant(xv, gv, qv, quant, opt); });
}

void AddRmsNormQuant(const Desc& residual, const Desc& delta, const Desc& gamma, const Desc& q,
                     H scale, const Desc& scales, H eps, H rounding, H weight_offset,
                     H normalize_rounded_sum) {
  constexpr const char* kFn = "glmnorm.add_rms_norm_quant";
  auto opt = AddOptions(kFn, eps, rounding, weight_offset, normalize_rounded_sum);
  auto quant = Quant(kFn, scale, scales);
  auto rv = ToView<void*>(kFn, residual, "residual");
  auto dv = ToView<const void*>(kFn, delta, "delta");
  auto gv = ToView<const void*>(kFn, gamma, "weight");
  auto qv = ToView<void*>(kFn, q, "out");
  Run(kFn, [&] { glmnorm::AddRmsNormQuant(rv, dv, gv, qv, quant, opt); });
}

// The backward kernels (rms_norm_backward.h, add_rms_norm_backward.h,
// qk_norm_backward.h). Workspace: the library's per-thread arena (it grows to
// the largest call on the thread, then is reused: no allocation per call).
// An empty descriptor (rank 0) is an absent optional tensor.
void RmsNormBackward(const Desc& x, const Desc& gamma, const Desc& dy, const Desc& dx,
                     const Desc& dgamma, const Desc& rstd, H eps, H rounding,
                     H weight_offset) {
  constexpr const char* kFn = "glmnorm.rms_norm_backward";
  auto opt = Options(kFn, eps, rounding, weight_offset);
  auto xv = ToView<const void*>(kFn, x, "x");
  auto gv = ToView<const void*>(kFn, gamma, "weight");
  auto dyv = ToView<const void*>(kFn, dy, "dy");
  auto dxv = ToView<void*>(kFn, dx, "dx");
  auto dgv = ToView<void*>(kFn, dgamma, "dweight");
  auto rv = ToView<const void*>(kFn, rstd, "rstd");
  Run(kFn, [&] { glmnorm::RmsNormBackward(xv, gv, dyv, dxv, dgv, opt, rv); }, {{"dx", "out"}});
}

void AddRmsNormBackward(const Desc& h, const Desc& gamma, const Desc& dy,
                        const Desc& d_residual_out, const Desc& d_h, const Desc& d_delta,
                        const Desc& dgamma, const Desc& rstd, H eps, H rounding,
                        H weight_offset, H normalize_rounded_sum) {
  constexpr const char* kFn = "glmnorm.add_rms_norm_backward";
  auto opt = AddOptions(kFn, eps, rounding, weight_offset,
                        normalize_rounded_sum);
  auto hv = ToView<const void*>(kFn, h, "residual");
  auto gv = ToView<const void*>(kFn, gamma, "weight");
  auto dyv = ToView<const void*>(kFn, dy, "dy");
  auto drv = ToView<const void*>(kFn, d_residual_out, "d_residual_out");
  auto dhv = ToView<void*>(kFn, d_h, "d_residual");
  auto ddv = ToView<void*>(kFn, d_delta, "d_delta");
  auto dgv = ToView<void*>(kFn, dgamma, "dweight");
  auto rv = ToView<const void*>(kFn, rstd, "rstd");
  // Python's out is the C++ d_h (the residual's gradient).
  Run(kFn, [&] { glmnorm::AddRmsNormBackward(hv, gv, dyv, drv, dhv, ddv, dgv, opt, rv); },
      {{"d_h", "out"}, {"h", "residual"}});
}

void QkNormBackward(const Desc& qkv, const Desc& dqkv_out, const Desc& dqkv_in,
                    H num_q_heads, H num_k_heads, H num_v_heads, H head_dim,
                    const Desc& q_gamma, const Desc& k_gamma, const Desc& dq_gamma,
                    const Desc& dk_gamma, H eps, H rounding, H weight_offset, H rotary_dim,
                    const Desc& cos, const Desc& sin, const Desc& positions) {
  constexpr const char* kFn = "glmnorm.qk_norm_backward";
  const glmnorm::QkHeads heads = Heads(kFn, num_q_heads, num_k_heads, num_v_heads, head_dim);
  auto opt = Options(kFn, eps, rounding, weight_offset);
  const glmnorm::Rope rope = RopeOf(kFn, rotary_dim, cos, sin, positions);
  auto in = ToView<const void*>(kFn, qkv, "qkv");
  auto dout = ToView<const void*>(kFn, dqkv_out, "dqkv_out");
  auto din = ToView<void*>(kFn, dqkv_in, "out");
  auto qg = ToView<const void*>(kFn, q_gamma, "q_weight");
  auto kg = ToView<const void*>(kFn, k_gamma, "k_weight");
  auto dqg = ToView<void*>(kFn, dq_gamma, "dq_weight");
  auto dkg = ToView<void*>(kFn, dk_gamma, "dk_weight");
  Run(kFn, [&] { glmnorm::QkNormBackward(in, dout, din, heads, qg, kg, dqg, dkg, opt, rope); });
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

  // Every scalar is taken as a Python object and converted by the functions
  // above: .none() lets None through to them (nanobind would otherwise refuse
  // it with its signature dump instead of a message naming the argument).
  auto a = [](const char* name) { return nb::arg(name); };
  auto n = [](const char* name) { return nb::arg(name).none(); };
  m.def("rms_norm", &RmsNorm, a("x"), a("weight"), a("out"), n("eps"), n("rounding"),
        n("weight_offset"));
  m.def("add_rms_norm", &AddRmsNorm, a("residual"), a("delta"), a("weight"), a("out"),
        n("eps"), n("rounding"), n("weight_offset"), n("normalize_rounded_sum"));
  m.def("qk_norm", &QkNorm, a("qkv"), a("out"), n("num_q_heads"), n("num_k_heads"),
        n("num_v_heads"), n("head_dim"), a("q_weight"), a("k_weight"), n("eps"), n("rounding"),
        n("weight_offset"), n("rotary_dim"), a("cos"), a("sin"), a("positions"));
  m.def("rms_norm_quant", &RmsNormQuant, a("x"), a("weight"), a("out"), n("scale"),
        a("scales"), n("eps"), n("rounding"), n("weight_offset"));
  m.def("add_rms_norm_quant", &AddRmsNormQuant, a("residual"), a("delta"), a("weight"),
        a("out"), n("scale"), a("scales"), n("eps"), n("rounding"), n("weight_offset"),
        n("normalize_rounded_sum"));
  m.def("rms_norm_backward", &RmsNormBackward, a("x"), a("weight"), a("dy"), a("dx"),
        a("dweight"), a("rstd"), n("eps"), n("rounding"), n("weight_offset"));
  m.def("add_rms_norm_backward", &AddRmsNormBackward, a("residual"), a("weight"), a("dy"),
        a("d_residual_out"), a("d_residual"), a("d_delta"), a("dweight"), a("rstd"), n("eps"),
        n("rounding"), n("weight_offset"), n("normalize_rounded_sum"));
  m.def("qk_norm_backward", &QkNormBackward, a("qkv"), a("dqkv_out"), a("dqkv_in"),
        n("num_q_heads"), n("num_k_heads"), n("num_v_heads"), n("head_dim"), a("q_weight"),
        a("k_weight"), a("dq_weight"), a("dk_weight"), n("eps"), n("rounding"),
        n("weight_offset"), n("rotary_dim"), a("cos"), a("sin"), a("positions"));
  m.def("output_dtype", &OutputDType);
  // check_args(fn, {name: value}): the scalar arguments of a call converted as
  // every function here converts them (TypeError / ValueError naming fn and
  // the argument); with eps, rounding and weight_offset all given, also the
  // library's checks of the options. For Python code that takes arguments
  // before any call (RMSNorm's constructor) or explains torch's own
  // argument-parsing errors.
  m.def("check_args", [](const char* fn, nb::dict args) {
    auto get = [&](const char* name) { return args.contains(name) ? args[name] : nb::handle(); };
    for (const char* name : {"num_q_heads", "num_k_heads", "num_v_heads", "head_dim",
                             "rotary_dim"}) {
      if (get(name).is_valid()) Int(fn, name, get(name));
    }
    if (get("scale").is_valid() && !get("scale").is_none()) Float(fn, "scale", get("scale"));
    if (get("normalize_rounded_sum").is_valid()) {
      Bool(fn, "normalize_rounded_sum", get("normalize_rounded_sum"));
    }
    if (get("eps").is_valid() && get("rounding").is_valid() && get("weight_offset").is_valid()) {
      const glmnorm::NormOptions o = Options(fn, get("eps"), get("rounding"), get("weight_offset"));
      Run(fn, [&] { glmnorm::CheckNormOptions(o); });
    } else {  // some of them: each converted alone
      if (get("rounding").is_valid()) RoundingOf(fn, get("rounding"));
      for (const char* name : {"eps", "weight_offset"}) {
        if (get(name).is_valid()) Float(fn, name, get(name));
      }
    }
  });
  // output_block(nbytes): a writable uint8 numpy array over a block of the
  // library's output cache (glmnorm/output_cache.h), released to the cache
  // when the array (or any view of it, a torch tensor included) is freed: the
  // package's new outputs of OUTPUT_CACHE_MIN_BYTES or more, so a call without
  // out= writes memory that is already mapped instead of faulting in fresh
  // pages (7x the kernel at 4096 x 5120 through a torch tensor).
  m.attr("OUTPUT_CACHE_MIN_BYTES") = glmnorm::kOutputCacheMinBytes;
  m.def("output_block", [](size_t nbytes) {
    const auto block = Named("glmnorm", [&] { return glmnorm::AcquireOutputBlock(nbytes); });
    nb::capsule owner(block.owner, [](void* p) noexcept { glmnorm::ReleaseOutputBlock(p); });
    size_t shape[1] = {nbytes};
    return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(block.data, 1, shape, owner);
  });
  m.def("set_num_threads", [](H n) {
    constexpr const char* kFn = "glmnorm.set_num_threads";
    const int threads = Int(kFn, "n", n);
    Run(kFn, [&] { glmnorm::SetNumThreads(threads); });
  });
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
