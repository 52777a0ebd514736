// model.safetensors.index.json: which shard holds which tensor.
#include "io/json_util.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"

namespace glmnorm {
namespace {

// A shard is a file of the checkpoint directory: a name that could reach
// outside it (absolute, "..") is refused before any file is opened.
bool SafeShardName(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string::npos) slash = name.size();
    const std::string_view part(name.data() + start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return true;
}

}  // namespace

ShardIndex ParseShardIndex(std::string_view json_text, const std::string& label) {
  const nlohmann::json index = checkpoint::ParseStrictJson(json_text, label, /*max_depth=*/8);
  if (!index.is_object()) throw Error(label + ": not a JSON object");
  ShardIndex out;
  if (index.contains("metadata") && index["metadata"].is_object() &&
      index["metadata"].contains("total_size")) {
    const nlohmann::json& t = index["metadata"]["total_size"];
    // Some writers store it as a float; it is informative only.
    if (t.is_number() && !t.is_number_float()) {
      out.total_size = checkpoint::GetUnsigned(t, label, "metadata.total_size");
    }
  }
  if (!index.contains("weight_map")) throw Error(label + ": no \"weight_map\"");
  const nlohmann::json& map = index["weight_map"];
  if (!map.is_object()) throw Error(label + ": weight_map is not a JSON object");
  for (const auto& [name, file] : map.items()) {
    if (!file.is_string()) {
      throw Error(label + ": weight_map[\"" + name +
                  "\"] is not a file name: " + checkpoint::Excerpt(file));
    }
    std::string shard = file.get<std::string>();
    if (!SafeShardName(shard)) {
      throw Error(label + ": weight_map[\"" + name + "\"] = \"" + shard +
                  "\" is not a file name inside the checkpoint directory");
    }
    out.weight_map.emplace(name, std::move(shard));
  }
  return out;
}

}  // namespace glmnorm
