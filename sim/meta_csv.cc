#include "sim/meta_csv.h"

#include "sim/errors.h"
#include "sim/input_file.h"
#include "sim/text.h"

namespace moe::sim {

std::vector<TokenMeta> read_meta_csv(const std::string& path, long long expected_rows) {
  return parse_meta_csv(read_input_file(path, "meta file"), path, expected_rows);
}

std::vector<TokenMeta> parse_meta_csv(const std::string& text, const std::string& path,
                                      long long expected_rows) {
  std::vector<TokenMeta> out;
  size_t line_no = 0;
  bool header_seen = false;
  for (const std::string_view line : lines(text)) {
    ++line_no;
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const std::string where = "meta '" + path + "' line " + std::to_string(line_no);
    const auto cells = split(t, ',');
    if (!header_seen) {
      if (cells.size() != 2 || cells[0] != "request_id" || cells[1] != "position") {
        throw DataError(where + ": expected the header 'request_id,position', got '" + t + "'");
      }
      header_seen = true;
      continue;
    }
    if (cells.size() != 2) {
      throw DataError(where + ": expected 2 fields, got " + std::to_string(cells.size()));
    }
    try {
      const uint64_t id = parse_uint64(cells[0], "request_id");
      const uint64_t position = parse_uint64(cells[1], "position");
      if (position > 0xffffffffull) throw UsageError("position " + cells[1] + " does not fit 32 bits");
      out.push_back(TokenMeta{id, static_cast<uint32_t>(position)});
    } catch (const UsageError& e) {
      throw DataError(where + ": " + e.what());
    }
  }
  if (!header_seen)
    throw DataError("meta '" + path + "' is empty (expected the header 'request_id,position')");
  if (expected_rows >= 0 && static_cast<long long>(out.size()) != expected_rows) {
    throw DataError("meta '" + path + "' has " + std::to_string(out.size()) + " rows but the logits have " +
                    std::to_string(expected_rows));
  }
  return out;
}

}  // namespace moe::sim
