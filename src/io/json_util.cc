#include "io/json_util.h"

#include <set>
#include <vector>

#include "glmnorm/error.h"

namespace glmnorm::checkpoint {

using nlohmann::json;

nlohmann::json ParseStrictJson(std::string_view text, const std::string& label, int max_depth) {
  // One key set per open object; the callback sees keys in order.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  bool too_deep = false;
  json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && duplicate.empty() &&
            !keys.back().insert(parsed.get<std::string>()).second) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    if (depth > max_depth) {
      too_deep = true;
      return false;  // discard: keeps a hostile input from building a deep tree
    }
    return true;
  };
  json value;
  try {
    value = json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true,
                        /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, ...".
    std::string what = e.what();
    const size_t close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
    throw Error(label + ": not valid JSON (" + what + ")");
  }
  if (too_deep) {
    throw Error(label + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
  }
  if (!duplicate.empty()) {
    throw Error(label + ": duplicate key \"" + duplicate + "\" in a JSON object");
  }
  return value;
}

std::string Excerpt(const nlohmann::json& value) {
  std::string s = value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  constexpr size_t kMax = 60;
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s;
}

uint64_t GetUnsigned(const nlohmann::json& value, const std::string& label, std::string_view what) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  throw Error(label + ": " + std::string(what) + " must be a non-negative integer, got " +
              Excerpt(value));
}

}  // namespace glmnorm::checkpoint
