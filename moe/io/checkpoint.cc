#include "moe/io/checkpoint.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace moe::io {
namespace {

using json = nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Checkpoint::Checkpoint(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / kIndexName, ec)) {
      open_index(path / kIndexName);
    } else if (std::filesystem::exists(path / kSingleName, ec)) {
      shards_.emplace_back(path / kSingleName);
    } else {
      throw IoError("checkpoint directory " + path.string() + " has neither " + kIndexName + " nor " +
                    kSingleName);
    }
  } else if (ends_with(path.filename().string(), ".json")) {
    open_index(path);
  } else {
    shards_.emplace_back(path);
  }
}

std::shared_ptr<const Checkpoint> Checkpoint::open(const std::filesystem::path& path) {
  return std::make_shared<const Checkpoint>(path);
}

void Checkpoint::open_index(const std::filesystem::path& index_path) {
  indexed_ = true;
  std::ifstream in(index_path, std::ios::binary);
  if (!in) throw IoError("checkpoint index " + index_path.string() + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError("checkpoint index " + index_path.string() + ": read failed");
  json index;
  try {
    index = json::parse(text.str());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number that overflows
    throw std::invalid_argument("checkpoint index " + index_path.string() + ": invalid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw std::invalid_argument("checkpoint index " + index_path.string() + ": no \"weight_map\" object");
  }
  if (index["weight_map"].empty()) {
    throw std::invalid_argument("checkpoint index " + index_path.string() +
                                ": \"weight_map\" lists no tensor");
  }
  // Group tensor names by shard file, keyed by the shard's lexically normal relative path (so "a.safetensors"
  // and "./a.safetensors" are one shard, opened once); open shards in that path's order.
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      throw std::invalid_argument("checkpoint index " + index_path.string() + ": weight_map entry '" + name +
                                  "' is not a file name");
    }
    const std::filesystem::path rel(shard.get<std::string>());
    bool escapes = rel.empty() || rel.is_absolute();
    for (const auto& part : rel) escapes = escapes || part == "..";
    if (escapes) {
      throw std::invalid_argument("checkpoint index " + index_path.string() + ": shard '" + rel.string() +
                                  "' (for tensor '" + name +
                                  "') is not a relative path inside the checkpoint directory");
    }
    by_shard[rel.lexically_normal().generic_string()].push_back(name);
  }
  const std::filesystem::path dir = index_path.parent_path();
  for (const auto& [shard, tensor_names] : by_shard) {
    const std::filesystem::path rel(shard);
    const std::filesystem::path shard_path = dir / rel;
    std::error_code ec;
    if (!std::filesystem::exists(shard_path, ec)) {
      throw IoError("checkpoint index " + index_path.string() + " names shard " + shard_path.string() +
                    " (holding tensor '" + tensor_names.front() + "' and " +
                    std::to_string(tensor_names.size() - 1) + " more), which is missing");
    }
    shards_.emplace_back(shard_path);
    for (const auto& name : tensor_names) weight_map_.emplace(name, shards_.size() - 1);
  }
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  if (!indexed_) return shards_.front().find(name);
  const auto it = weight_map_.find(name);
  if (it == weight_map_.end()) return nullptr;
  const SafetensorsFile& shard = shards_[it->second];
  const TensorInfo* info = shard.find(name);
  if (info == nullptr) {
    throw std::invalid_argument("checkpoint " + path_.string() + ": tensor '" + std::string(name) +
                                "' is listed in the index but absent from its shard " +
                                shard.path().string());
  }
  return info;
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    throw std::invalid_argument("checkpoint " + path_.string() + ": no tensor named '" + std::string(name) +
                                "'");
  }
  return *info;
}

std::optional<RawTensor> Checkpoint::raw(std::string_view name) const {
  if (!indexed_) return shards_.front().raw(name);
  const auto it = weight_map_.find(name);
  if (it == weight_map_.end()) return std::nullopt;
  const SafetensorsFile& shard = shards_[it->second];
  auto t = shard.raw(name);
  if (!t) {
    throw std::invalid_argument("checkpoint " + path_.string() + ": tensor '" + std::string(name) +
                                "' is listed in the index but absent from its shard " +
                                shard.path().string());
  }
  return t;
}

bool Checkpoint::contains(std::string_view name) const {
  if (!indexed_) return shards_.front().contains(name);
  return weight_map_.find(name) != weight_map_.end();
}

std::vector<std::string> Checkpoint::names() const {
  if (!indexed_) return shards_.front().names();
  std::vector<std::string> out;
  out.reserve(weight_map_.size());
  for (const auto& [name, shard] : weight_map_) out.push_back(name);
  return out;
}

}  // namespace moe::io
