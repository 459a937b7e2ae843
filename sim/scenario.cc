#include "sim/scenario.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <toml.hpp>

#include "sim/errors.h"
#include "sim/input_file.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

std::string scalar_text(const toml::value& v, const std::string& where) {
  if (v.is_string()) return v.as_string().str;
  if (v.is_integer()) return std::to_string(v.as_integer());
  if (v.is_floating()) return format_double(v.as_floating());
  if (v.is_boolean()) return v.as_boolean() ? "true" : "false";
  throw UsageError(where + ": unsupported value type (use a string, number, boolean or array)");
}

void flatten(const toml::value& table, const std::string& name, const std::string& prefix, Overrides& out) {
  for (const auto& [key, value] : table.as_table()) {
    const std::string where = "scenario '" + name + "' key '" + prefix + key + "'";
    if (value.is_table()) {
      flatten(value, name, prefix + key + ".", out);
      continue;
    }
    const Setting* s = find_setting(key);
    if (s == nullptr) throw UsageError(where + ": unknown setting");
    std::string text;
    if (value.is_array()) {
      const char* sep = s->repeatable ? ";" : ",";
      for (const auto& item : value.as_array()) {
        if (!text.empty()) text += sep;
        text += scalar_text(item, where);
      }
    } else {
      text = scalar_text(value, where);
    }
    if (!out.emplace(key, text).second) throw UsageError(where + ": the setting is given twice");
  }
}

}  // namespace

Overrides parse_scenario(const std::string& text, const std::string& name) {
  // TOML is UTF-8. Checked before toml11 sees the text: toml11 3.7 reads out of bounds while reporting
  // invalid UTF-8 inside a string (found by the scenario fuzzer).
  if (const int64_t bad = utf8_error_offset(text); bad >= 0) {
    const auto before = std::string_view(text).substr(0, static_cast<size_t>(bad));
    const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
    const size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(text[static_cast<size_t>(bad)]));
    throw DataError("malformed scenario '" + name + "': not UTF-8 (byte " + byte + " at line " +
                    std::to_string(line) + ", column " + std::to_string(before.size() - line_start + 1) +
                    ")");
  }
  toml::value root;
  try {
    std::istringstream in(text);
    root = toml::parse(in, name);
  } catch (const std::exception& e) {
    throw DataError("malformed scenario '" + name + "': " + e.what());
  }
  Overrides out;
  flatten(root, name, "", out);
  return out;
}

Overrides read_scenario(const std::string& path) {
  return parse_scenario(read_input_file(path, "scenario file"), path);
}

}  // namespace moe::sim
