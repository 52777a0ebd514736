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
  // option structs ("rope.cos", "heads.head_dim") are plain arguments in
  // Python: their struct prefix is dropped below.
  static constexpr Rename kNames[] = {
      {"gamma", "weight"},          {"q_gamma", "q_weight"},   {"k_gamma", "k_weight"},
      {"dgamma", "dweight"},        {"dq_gamma", "dq_weight"}, {"dk_gamma", "dk_weight"},
      {"y", "out"},                 {"qkv_in", "qkv"},         {"qkv_out", "out"},
      {"dqkv_out", "dqkv"},         {"dqkv_in", "out"},        {"d_h", "d_residual"},
  };
  // Drop the C++ function ("RmsNorm: ", "QkNormBackward: ").
  size_t start = 0;
  const size_t colon = what.find(": ");
  if (colon != std::string_view::npos && colon > 0 && std::isupper(static_cast<unsigned char>(what[0]))) {
    bool identifier = true;
    for (size_t i = 0; i < colon; ++i) {
      identifier = identifier && std::isalnum(static_cast<unsigned char>(what[i]));
    }
    if (identifier) start = colon + 2;
  }
  std::string out(fn);
  out += ": ";
  // Rename whole identifiers (letters, digits, '_', and '.' inside a dotted
  // name), leaving everything else as it is.
  auto is_word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  size_t i = start;
  while (i < what.size()) {
    // A quoted value ('single', a user's string) is copied as it is; an
    // apostrophe after a word ("qkv_in's") opens no quote.
    if (what[i] == '\'' && (i == start || !is_word(what[i - 1]))) {
      const size_t close = what.find('\'', i + 1);
      const size_t end = close == std::string_view::npos ? what.size() : close + 1;
      out += what.substr(i, end - i);
      i = end;
      continue;
    }
    if (!is_word(what[i])) {
      out += what[i++];
      continue;
    }
    size_t j = i;
    while (j < what.size() &&
           (is_word(what[j]) || (what[j] == '.' && j + 1 < what.size() && is_word(what[j + 1]) &&
                                 !std::isdigit(static_cast<unsigned char>(what[j + 1]))))) {
      ++j;
    }
    std::string_view word = what.substr(i, j - i);
    for (std::string_view group : {"rope.", "heads."}) {
      if (word.size() > group.size() && word.substr(0, group.size()) == group) {
        word.remove_prefix(group.size());
      }
    }
    auto lookup = [&](std::string_view w, std::string_view* to) {
      for (const Rename& r : extra) {
        if (r.first == w) {
          *to = r.second;
          return true;
        }
      }
      for (const Rename& r : kNames) {
        if (r.first == w) {
          *to = r.second;
          return true;
        }
      }
      return false;
    };
    // The longest dotted prefix with a Python name is renamed, the fields
    // after it kept: "rope.cos.stride[1]" -> "cos.stride[1]".
    size_t cut = word.size();
    std::string_view to;
    while (!lookup(word.substr(0, cut), &to)) {
      cut = word.rfind('.', cut - 1);
      if (cut == std::string_view::npos || cut == 0) break;
    }
    if (cut == std::string_view::npos || cut == 0) {
      out += word;
    } else {
      out += to;
      out += word.substr(cut);
    }
    i = j;
  }
  return out;
}

}  // namespace glmnorm_python

#endif  // GLMNORM_PYTHON_MESSAGES_H_
