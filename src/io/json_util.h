// Strict JSON parsing for the checkpoint readers: nlohmann-json, but a
// duplicate key or absurd nesting is an error (nlohmann silently keeps the
// last duplicate, which would let two headers disagree about one tensor).
#ifndef GLMNORM_CHECKPOINT_JSON_UTIL_H_
#define GLMNORM_CHECKPOINT_JSON_UTIL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace glmnorm::checkpoint {

// Parses `text`; throws glmnorm::Error "<label>: ..." on malformed JSON, a
// duplicate key in any object, or nesting deeper than max_depth.
nlohmann::json ParseStrictJson(std::string_view text, const std::string& label, int max_depth = 8);

// A short, printable excerpt of a JSON value for error messages.
std::string Excerpt(const nlohmann::json& value);

// Reads a non-negative integer (JSON unsigned or non-negative integer; not a
// float, not a bool). Throws "<label>: <what> must be ..." otherwise.
uint64_t GetUnsigned(const nlohmann::json& value, const std::string& label, std::string_view what);

}  // namespace glmnorm::checkpoint

#endif  // GLMNORM_CHECKPOINT_JSON_UTIL_H_
