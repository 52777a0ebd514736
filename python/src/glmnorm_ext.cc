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

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "glmnorm/checkpoint.h"
#include "glmnorm/glmnorm.h"
#include "glmnorm/output_cache.h"
#include "messages.h"

namespace nb = nanobind;

namespace {

// A descriptor's shape or strides: at most kMaxRank ints, held inline (a
// std::vector here cost two heap allocations per array per call).
struct Dims {
  int size = 0;
  int64_t v[glmnorm::kMaxRank] = {};
};

}  // namespace

namespace nanobind::detail {
// Dims from a tuple (torch.Size included) or list of ints; anything else does
// not convert. More than kMaxRank ints keep only their count, which View()
// refuses (a fault of the package: _arrays.desc refuses rank > 4 by the
// argument's name).
template <>
struct type_caster<Dims> {
  NB_TYPE_CASTER(Dims, const_name("tuple[int, ...]"))

  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    PyObject* o = src.ptr();
    if (!PyTuple_Check(o) && !PyList_Check(o)) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    value.size = static_cast<int>(std::min<Py_ssize_t>(n, glmnorm::kMaxRank + 1));
    for (Py_ssize_t i = 0; i < std::min<Py_ssize_t>(n, glmnorm::kMaxRank); ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(o, i);
      if (!PyLong_Check(item)) return false;
      const long long x = PyLong_AsLongLong(item);
      if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      value.v[i] = x;
    }
    return true;
  }
};
}  // namespace nanobind::detail

namespace {

// (address, dtype code = int(glmnorm::DType), shape, strides in elements).
using Desc = std::tuple<uintptr_t, int, Dims, Dims>;

// The view a descriptor describes. _arrays.desc made it from the user's array
// and has refused, by the argument's name, what a view cannot hold (rank > 4),
// so a bad descriptor is a fault of the package, not of the user.
template <typename Ptr>
glmnorm::BasicTensorView<Ptr> View(const Desc& d) {
  const auto& [addr, dtype, shape, strides] = d;
  if (shape.size > glmnorm::kMaxRank || shape.size != strides.size || dtype < 0 ||
      dtype > static_cast<int>(glmnorm::DType::kI64)) {
    throw std::logic_error("glmnorm: internal error: a bad array descriptor");
  }
  glmnorm::BasicTensorView<Ptr> v;
  v.data = reinterpret_cast<Ptr>(addr);
  v.dtype = static_cast<glmnorm::DType>(dtype);
  v.rank = shape.size;
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = shape.v[i];
    v.stride[i] = strides.v[i];
  }
  return v;
}
constexpr auto In = View<const void*>;
constexpr auto Out = View<void*>;

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

// Python numbers and the scalars that behave as them (numpy's float32 /
// int64..., as torch's own ops take them): a float is anything with
// __float__, an int anything with __index__; never a bool or a str.
double Float(const char* fn, const char* name, nb::handle h) {
  const PyNumberMethods* number = Py_TYPE(h.ptr())->tp_as_number;
  if (number == nullptr || number->nb_float == nullptr || PyBool_Check(h.ptr())) {
    WrongType(fn, name, "a float", h);
  }
  const double v = PyFloat_AsDouble(h.ptr());
  if (v == -1.0 && PyErr_Occurred()) {  // an int past double's range: the library cannot get it
    PyErr_Clear();
    throw nb::value_error((std::string(fn) + ": " + name + " must fit in float32, got " +
                           nb::str(h).c_str()).c_str());
  }
  return v;
}

int64_t Int(const char* fn, const char* name, nb::handle h) {
  if (!PyIndex_Check(h.ptr()) || PyBool_Check(h.ptr())) {
    WrongType(fn, name, "an int", h);
  }
  const nb::object index = nb::steal(PyNumber_Index(h.ptr()));
  if (!index.is_valid()) {
    PyErr_Clear();
    WrongType(fn, name, "an int", h);
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) {  // past int64: the library cannot get it
    throw nb::value_error((std::string(fn) + ": " + name + " must fit in 32 bits, got " +
                           nb::str(h).c_str()).c_str());
  }
  return v;
}

// Int and Float, then the library's range rule (refused, not narrowed).
int Int32(const char* fn, const char* name, nb::handle h) {
  const int64_t v = Int(fn, name, h);
  return Named(fn, [&] { return glmnorm::Int32Argument(name, v); });
}

float Float32(const char* fn, const char* name, nb::handle h) {
  const double v = Float(fn, name, h);
  return Named(fn, [&] { return glmnorm::Float32Argument(name, v); });
}

bool Bool(const char* fn, const char* name, nb::handle h) {
  if (!PyBool_Check(h.ptr())) {
    WrongType(fn, name, "a bool", h);
  }
  return h.ptr() == Py_True;
}

std::string Str(const char* fn, const char* name, nb::handle h) {
  if (!PyUnicode_Check(h.ptr())) {
    WrongType(fn, name, "a str ('cast-then-scale' or 'single')", h);
  }
  return nb::cast<std::string>(h);
}

// (eps, rounding, weight_offset) of every norm, by the library's rules.
glmnorm::NormOptions Options(const char* fn, nb::handle eps, nb::handle rounding,
                             nb::handle weight_offset) {
  const double e = Float(fn, "eps", eps);
  const std::string r = Str(fn, "rounding", rounding);
  const double w = Float(fn, "weight_offset", weight_offset);
  return Named(fn, [&] { return glmnorm::NormOptionsFrom(e, r, w); });
}

glmnorm::AddNormOptions AddOptions(const char* fn, nb::handle eps, nb::handle rounding,
                                   nb::handle weight_offset, nb::handle normalize_rounded_sum) {
  return {Options(fn, eps, rounding, weight_offset),
          Bool(fn, "normalize_rounded_sum", normalize_rounded_sum)};
}

// A static scale (scales is then empty), or the per-row scales the kernel writes.
glmnorm::QuantOptions Quant(const char* fn, nb::handle scale, const Desc& scales) {
  if (scale.is_none()) return {glmnorm::QuantScaling::kDynamicPerToken, 1.0f, Out(scales)};
  return {glmnorm::QuantScaling::kStatic, Float32(fn, "scale", scale), Out(scales)};
}

glmnorm::QkHeads Heads(const char* fn, nb::handle nq, nb::handle nk, nb::handle nv,
                       nb::handle head_dim) {
  const int64_t q = Int(fn, "num_q_heads", nq), k = Int(fn, "num_k_heads", nk);
  const int64_t v = Int(fn, "num_v_heads", nv), d = Int(fn, "head_dim", head_dim);
  return Named(fn, [&] { return glmnorm::QkHeadsFrom(q, k, v, d); });
}

using H = nb::handle;

// The Rope argument of the QK functions: an absent table is an empty
// descriptor; the library checks the tables against rotary_dim.
glmnorm::Rope RopeOf(const char* fn, H rotary_dim, const Desc& cos, const Desc& sin,
                     const Desc& positions) {
  return {Int32(fn, "rotary_dim", rotary_dim), In(cos), In(sin), In(positions)};
}

// Runs a library call with the GIL released (errors as Named).
template <typename F>
void Run(const char* fn, F&& call, std::initializer_list<glmnorm_python::Rename> renames = {}) {
  Named(fn, [&] {
    nb::gil_scoped_release release;
    call();
  }, renames);
}

// The package's functions (python/glmnorm/__init__.py), one per library call.
// Python's `out` is the C++ y (or dx, d_h, dqkv_in: the renames).
void RmsNorm(const Desc& x, const Desc& gamma, const Desc& y, H eps, H rounding,
             H weight_offset) {
  constexpr const char* kFn = "glmnorm.rms_norm";
  const auto opt = Options(kFn, eps, rounding, weight_offset);
  Run(kFn, [&] { glmnorm::RmsNorm(In(x), In(gamma), Out(y), opt); });
}

void AddRmsNorm(const Desc& residual, const Desc& delta, const Desc& gamma, const Desc& y,
                H eps, H rounding, H weight_offset, H normalize_rounded_sum) {
  constexpr const char* kFn = "glmnorm.add_rms_norm";
  const auto opt = AddOptions(kFn, eps, rounding, weight_offset, normalize_rounded_sum);
  Run(kFn, [&] { glmnorm::AddRmsNorm(Out(residual), In(delta), In(gamma), Out(y), opt); });
}

void QkNorm(const Desc& qkv_in, const Desc& qkv_out, H num_q_heads, H num_k_heads,
            H num_v_heads, H head_dim, const Desc& q_gamma, const Desc& k_gamma, H eps,
            H rounding, H weight_offset, H rotary_dim, const Desc& cos, const Desc& sin,
            const Desc& positions) {
  constexpr const char* kFn = "glmnorm.qk_norm";
  const auto heads = Heads(kFn, num_q_heads, num_k_heads, num_v_heads, head_dim);
  const auto opt = Options(kFn, eps, rounding, weight_offset);
  const auto rope = RopeOf(kFn, rotary_dim, cos, sin, positions);
  Run(kFn, [&] {
    glmnorm::QkNorm(In(qkv_in), Out(qkv_out), heads, In(q_gamma), In(k_gamma), opt, rope);
  });
}

void RmsNormQuant(const Desc& x, const Desc& gamma, const Desc& q, H scale, const Desc& scales,
                  H eps, H rounding, H weight_offset) {
  constexpr const char* kFn = "glmnorm.rms_norm_quant";
  const auto opt = Options(kFn, eps, rounding, weight_offset);
  const auto quant = Quant(kFn, scale, scales);
  Run(kFn, [&] { glmnorm::RmsNormQuant(In(x), In(gamma), Out(q), quant, opt); }, {{"q", "out"}});
}

void AddRmsNormQuant(const Desc& residual, const Desc& delta, const Desc& gamma, const Desc& q,
                     H scale, const Desc& scales, H eps, H rounding, H weight_offset,
                     H normalize_rounded_sum) {
  constexpr const char* kFn = "glmnorm.add_rms_norm_quant";
  const auto opt = AddOptions(kFn, eps, rounding, weight_offset, normalize_rounded_sum);
  const auto quant = Quant(kFn, scale, scales);
  Run(kFn, [&] {
    glmnorm::AddRmsNormQuant(Out(residual), In(delta), In(gamma), Out(q), quant, opt);
  }, {{"q", "out"}});
}

// The backward kernels (rms_norm_backward.h, add_rms_norm_backward.h,
// qk_norm_backward.h). Workspace: the library's per-thread arena (it grows to
// the largest call on the thread, then is reused: no allocation per call).
// An empty descriptor (rank 0) is an absent optional tensor.
void RmsNormBackward(const Desc& x, const Desc& gamma, const Desc& dy, const Desc& dx,
                     const Desc& dgamma, const Desc& rstd, H eps, H rounding,
                     H weight_offset) {
  constexpr const char* kFn = "glmnorm.rms_norm_backward";
  const auto opt = Options(kFn, eps, rounding, weight_offset);
  Run(kFn, [&] {
    glmnorm::RmsNormBackward(In(x), In(gamma), In(dy), Out(dx), Out(dgamma), opt, In(rstd));
  }, {{"dx", "out"}});
}

void AddRmsNormBackward(const Desc& h, const Desc& gamma, const Desc& dy,
                        const Desc& d_residual_out, const Desc& d_h, const Desc& d_delta,
                        const Desc& dgamma, const Desc& rstd, H eps, H rounding,
                        H weight_offset, H normalize_rounded_sum) {
  constexpr const char* kFn = "glmnorm.add_rms_norm_backward";
  const auto opt = AddOptions(kFn, eps, rounding, weight_offset, normalize_rounded_sum);
  Run(kFn, [&] {
    glmnorm::AddRmsNormBackward(In(h), In(gamma), In(dy), In(d_residual_out), Out(d_h),
                                Out(d_delta), Out(dgamma), opt, In(rstd));
  }, {{"d_h", "out"}, {"h", "residual"}});
}

void QkNormBackward(const Desc& qkv, const Desc& dqkv_out, const Desc& dqkv_in,
                    H num_q_heads, H num_k_heads, H num_v_heads, H head_dim,
                    const Desc& q_gamma, const Desc& k_gamma, const Desc& dq_gamma,
                    const Desc& dk_gamma, H eps, H rounding, H weight_offset, H rotary_dim,
                    const Desc& cos, const Desc& sin, const Desc& positions) {
  constexpr const char* kFn = "glmnorm.qk_norm_backward";
  const auto heads = Heads(kFn, num_q_heads, num_k_heads, num_v_heads, head_dim);
  const auto opt = Options(kFn, eps, rounding, weight_offset);
  const auto rope = RopeOf(kFn, rotary_dim, cos, sin, positions);
  Run(kFn, [&] {
    glmnorm::QkNormBackward(In(qkv), In(dqkv_out), Out(dqkv_in), heads, In(q_gamma),
                            In(k_gamma), Out(dq_gamma), Out(dk_gamma), opt, rope);
  });
}

// The dtype code of a new output of `op` given the dtype codes of its tensor
// arguments (the library's rule): "rms_norm" (x, weight), "add_rms_norm"
// (residual, delta, weight). A code that is not a float activation gives
// f32 (the call itself then reports the dtype).
int OutputDType(const std::string& op, const std::vector<int>& codes, H rounding) {
  const std::string fn = "glmnorm." + op, name = Str(fn.c_str(), "rounding", rounding);
  const glmnorm::Rounding r = Named(fn.c_str(), [&] { return glmnorm::RoundingFromName(name); });
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
  m.def("output_dtype", &OutputDType, a("op"), a("codes"), n("rounding"));
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
      if (get(name).is_valid()) Int32(fn, name, get(name));
    }
    if (get("scale").is_valid() && !get("scale").is_none()) Float32(fn, "scale", get("scale"));
    if (get("normalize_rounded_sum").is_valid()) {
      Bool(fn, "normalize_rounded_sum", get("normalize_rounded_sum"));
    }
    if (get("eps").is_valid() && get("rounding").is_valid() && get("weight_offset").is_valid()) {
      const glmnorm::NormOptions o = Options(fn, get("eps"), get("rounding"), get("weight_offset"));
      Run(fn, [&] { glmnorm::CheckNormOptions(o); });
    } else {  // some of them: each converted alone
      if (get("rounding").is_valid()) {
        const std::string r = Str(fn, "rounding", get("rounding"));
        Named(fn, [&] { return glmnorm::RoundingFromName(r); });
      }
      for (const char* name : {"eps", "weight_offset"}) {
        if (get(name).is_valid()) Float32(fn, name, get(name));
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
  m.attr("MAX_RANK") = glmnorm::kMaxRank;  // the dims a view holds
  m.def("output_block", [](size_t nbytes) {
    const auto block = Named("glmnorm", [&] { return glmnorm::AcquireOutputBlock(nbytes); });
    nb::capsule owner(block.owner, [](void* p) noexcept { glmnorm::ReleaseOutputBlock(p); });
    size_t shape[1] = {nbytes};
    return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(block.data, 1, shape, owner);
  });
  m.def("set_num_threads", [](H n) {
    constexpr const char* kFn = "glmnorm.set_num_threads";
    const int threads = Int32(kFn, "n", n);
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
