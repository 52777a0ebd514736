// The library's error messages as a Python caller reads them, shared by the
// two bindings (glmnorm_ext.cc, torch_ops.cc).
//
// The C++ library names its own function and arguments ("RmsNorm: gamma
// length must equal the width 8, got 7"). A Python user called
// glmnorm.rms_norm(x, weight, out=...), so the binding puts the Python
// function in front, drops the C++ one, and spells each C++ argument as the
// Python signature does ("glmnorm.rms_norm: weight length must equal the
// width 8, got 7"). Only names change: the rule and the values are the
// library's.
#ifndef GLMNORM_PYTHON_MESSAGES_H_
#define GLMNORM_PYTHON_MESSAGES_H_

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace glmnorm_python {

using Rename = std::pair<std::string_view, std::string_view>;

// `fn` is the Python function ("glmnorm.rms_norm"); `extra` renames argument
// names of this call first (for example qkv_out -> qkv for an in-place op).
inline std::string PythonMessage(std::string_view fn, std::string_view what,
                                 std::initializer_list<Rename> extra = {}) {
  // The names every Python signature spells alike. The fields of the C++
  // option structs ("rope.cos", "heads.head_dim", "options.eps") are plain
  // Python arguments: their struct prefix is dropped.
  static constexpr Rename kNames[] = {
      {"gamma", "weight"},   {"q_gamma", "q_weight"},   {"k_gamma", "k_weight"},
      {"dgamma", "dweight"}, {"dq_gamma", "dq_weight"}, {"dk_gamma", "dk_weight"},
      {"y", "out"},          {"qkv_in", "qkv"},         {"qkv_out", "out"},
      {"dqkv_out", "dqkv"},  {"dqkv_in", "out"},        {"d_h", "d_residual"},
  };
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto python_name = [&](std::string_view w) {
    for (std::string_view group : {"rope.", "heads.", "options."}) {
      if (w.size() > group.size() && w.substr(0, group.size()) == group)
        w.remove_prefix(group.size());
    }
    // "qkv_out.stride[0]": the head is renamed, the field kept.
    const std::string_view head = w.substr(0, w.find('.')), field = w.substr(head.size());
    for (const Rename &r : extra) {
      if (r.first == head) return std::string(r.second).append(field);
    }
    for (const Rename &r : kNames) {
      if (r.first == head) return std::string(r.second).append(field);
    }
    return std::string(w);
  };
  // Drop the C++ function ("RmsNorm: ", "QkNormBackward: ").
  size_t i = what.find(": ");
  bool cpp_fn =
      i != std::string_view::npos && i > 0 && std::isupper(static_cast<unsigned char>(what[0]));
  for (size_t k = 0; cpp_fn && k < i; ++k)
    cpp_fn = std::isalnum(static_cast<unsigned char>(what[k]));
  i = cpp_fn ? i + 2 : 0;
  const size_t start = i;
  std::string out = std::string(fn) + ": ";
  while (i < what.size()) {
    size_t j = i + 1;
    if (what[i] == '\'' && (i == start || !word_char(what[i - 1]))) {
      // A quoted value ('single', the user's string) is kept as it is; an
      // apostrophe after a word ("qkv_in's") opens no quote.
      j = std::min(what.find('\'', i + 1), what.size() - 1) + 1;
      out += what.substr(i, j - i);
    } else if (word_char(what[i])) {
      // An identifier, dotted fields included ("rope.cos.stride"), not "1.5".
      while (j < what.size() &&
             (word_char(what[j]) || (what[j] == '.' && j + 1 < what.size() &&
                                     std::isalpha(static_cast<unsigned char>(what[j + 1]))))) {
        ++j;
      }
      out += python_name(what.substr(i, j - i));
    } else {
      out += what[i];
    }
    i = j;
  }
  return out;
}

}  // namespace glmnorm_python

#endif  // GLMNORM_PYTHON_MESSAGES_H_
