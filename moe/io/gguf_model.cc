#include "moe/io/gguf_model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>

namespace moe::io {
namespace {

// An integer metadata value of a shard (split.no and friends are u16 / i32 in llama.cpp's files; any integer
// type is accepted), or nullopt when absent. Throws when present with another type.
std::optional<int64_t> split_key(const GgufFile& f, const char* key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  const std::optional<int64_t> i = v->as_int();
  if (!i) {
    throw std::invalid_argument(f.path().string() + ": " + key + " must be an integer (got " + v->describe() +
                                ")");
  }
  return *i;
}

}  // namespace

bool parse_gguf_split_name(const std::string& filename, std::string* prefix, int* index, int* count) {
  // <prefix>-NNNNN-of-MMMMM.gguf
  constexpr size_t kTail = std::char_traits<char>::length("-00001-of-00003.gguf");
  if (filename.size() <= kTail) return false;
  const std::string tail = filename.substr(filename.size() - kTail);
  auto digits = [&](size_t at) {
    int v = 0;
    for (size_t i = at; i < at + 5; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(tail[i]))) return -1;
      v = v * 10 + (tail[i] - '0');
    }
    return v;
  };
  if (tail[0] != '-' || tail.compare(6, 4, "-of-") != 0 || tail.compare(15, 5, ".gguf") != 0) return false;
  const int i = digits(1), n = digits(10);
  if (i < 1 || n < 1 || i > n) return false;
  if (prefix) *prefix = filename.substr(0, filename.size() - kTail);
  if (index) *index = i;
  if (count) *count = n;
  return true;
}

std::string gguf_split_name(const std::string& prefix, int index, int count) {
  char tail[32];
  std::snprintf(tail, sizeof(tail), "-%05d-of-%05d.gguf", index, count);
  return prefix + tail;
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".gguf") return true;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string_view(magic, 4) == "GGUF";
}

GgufModel::GgufModel(const std::filesystem::path& path) : path_(path) {
  GgufFile given(path);
  const std::optional<int64_t> count = split_key(given, "split.count");
  if (!count || *count == 1) {
    shards_.push_back(std::move(given));
  } else {
    std::string prefix;
    int index = 0, name_count = 0;
    if (*count < 1 || *count > 99999) {
      throw std::invalid_argument(path.string() + ": split.count = " + std::to_string(*count) +
                                  " is out of range (1-99999)");
    }
    if (!parse_gguf_split_name(path.filename().string(), &prefix, &index, &name_count) ||
        name_count != *count) {
      throw std::invalid_argument(path.string() + ": split.count = " + std::to_string(*count) +
                                  " but the file name is not <prefix>-NNNNN-of-" +
                                  gguf_split_name("", 1, static_cast<int>(*count)).substr(10) +
                                  " (llama.cpp's names for the shards of a split model)");
    }
    const std::filesystem::path dir = path.parent_path();
    for (int i = 1; i <= name_count; ++i) {
      if (i == index) {
        shards_.push_back(std::move(given));
        continue;
      }
      const std::filesystem::path shard = dir / gguf_split_name(prefix, i, name_count);
      try {
        shards_.emplace_back(shard);
      } catch (const IoError& e) {
        throw IoError("split GGUF model " + path.string() + ": shard " + std::to_string(i) + " of " +
                      std::to_string(name_count) + " is missing or unreadable (" + e.what() + ")");
      }
    }
    for (int i = 0; i < name_count; ++i) {
      const GgufFile& s = shards_[static_cast<size_t>(i)];
      const std::optional<int64_t> no = split_key(s, "split.no");
      const std::optional<int64_t> n = split_key(s, "split.count");
      if (!no || *no != i || !n || *n != name_count) {
        throw std::invalid_argument(
            s.path().string() + ": shard " + std::to_string(i + 1) + " of " + std::to_string(name_count) +
            " by its name, but its split.no = " + (no ? std::to_string(*no) : std::string("(absent)")) +
            " and split.count = " + (n ? std::to_string(*n) : std::string("(absent)")) +
            " (expected split.no = " + std::to_string(i) + ", split.count = " + std::to_string(name_count) +
            ")");
      }
    }
  }
  size_t total = 0;
  for (const GgufFile& s : shards_) total += s.tensors().size();
  by_name_.reserve(total);
  for (const GgufFile& s : shards_) {
    for (const GgufTensorInfo& t : s.tensors()) by_name_.push_back({t.name, &t});
  }
  std::sort(by_name_.begin(), by_name_.end(),
            [](const Located& a, const Located& b) { return a.name < b.name; });
  for (size_t i = 1; i < by_name_.size(); ++i) {
    if (by_name_[i].name == by_name_[i - 1].name) {
      throw std::invalid_argument("split GGUF model " + path.string() + ": the tensor '" +
                                  gguf_printable(by_name_[i].name) + "' is in more than one shard");
    }
  }
  if (shards_.size() > 1) {
    const std::optional<int64_t> expected = split_key(shards_.front(), "split.tensors.count");
    if (expected && *expected != static_cast<int64_t>(total)) {
      throw std::invalid_argument("split GGUF model " + path.string() + ": split.tensors.count = " +
                                  std::to_string(*expected) + " but its " + std::to_string(shards_.size()) +
                                  " shards hold " + std::to_string(total) + " tensors");
    }
  }
}

std::shared_ptr<const GgufModel> GgufModel::open(const std::filesystem::path& path) {
  return std::make_shared<const GgufModel>(path);
}

const GgufTensorInfo* GgufModel::tensor(std::string_view name) const {
  const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                                   [](const Located& l, std::string_view n) { return l.name < n; });
  if (it == by_name_.end() || it->name != name) return nullptr;
  return it->info;
}

std::vector<std::string_view> GgufModel::tensor_names() const {
  std::vector<std::string_view> names;
  names.reserve(by_name_.size());
  for (const Located& l : by_name_) names.push_back(l.name);
  return names;
}

}  // namespace moe::io
