#include "sim/trace_reader.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "sim/errors.h"
#include "sim/input_file.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

// The largest arrival step, prompt or decode length a trace may give.
constexpr double kMaxTraceValue = 1073741824.0;  // 2^30

struct Fields {
  bool has_arrival_step = false, has_arrival_time = false, has_prompt = false, has_decode = false,
       has_id = false;
  double arrival_step = 0, arrival_time = 0, prompt = 0, decode = 0;
  uint64_t id = 0;
};

RequestSpec to_spec(const Fields& f, size_t row, const std::string& where) {
  auto fail = [&](const std::string& why) { throw DataError(where + ": " + why); };
  if (!f.has_arrival_step && !f.has_arrival_time) fail("missing arrival_step (or arrival_time)");
  if (!f.has_prompt) fail("missing prompt_len");
  if (!f.has_decode) fail("missing decode_len");
  auto integral = [&](double v, const char* name, double lo) {
    if (!std::isfinite(v) || v != std::floor(v) || v < lo || v > kMaxTraceValue) {
      fail(std::string(name) + " must be an integer >= " + std::to_string(static_cast<int>(lo)) + " (got " +
           format_double(v) + ")");
    }
    return static_cast<int64_t>(v);
  };
  RequestSpec r;
  r.id = f.has_id ? f.id : row;
  if (f.has_arrival_step) {
    r.arrival_step = integral(f.arrival_step, "arrival_step", 0);
  } else {
    if (!std::isfinite(f.arrival_time) || f.arrival_time < 0 || f.arrival_time >= kMaxTraceValue + 1) {
      fail("arrival_time must be a number in [0, 2^30 + 1) (got " + format_double(f.arrival_time) + ")");
    }
    r.arrival_step = static_cast<int64_t>(std::floor(f.arrival_time));
  }
  r.prompt_len = static_cast<uint32_t>(integral(f.prompt, "prompt_len", 1));
  r.decode_len = static_cast<uint32_t>(integral(f.decode, "decode_len", 0));
  return r;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<RequestSpec> read_trace(const std::string& path) {
  const bool jsonl = ends_with(path, ".jsonl") || ends_with(path, ".json");
  return parse_trace(read_input_file(path, "trace file"), path, jsonl);
}

std::vector<RequestSpec> parse_trace(const std::string& text, const std::string& path, bool jsonl) {
  std::vector<RequestSpec> out;
  std::set<uint64_t> ids;
  size_t line_no = 0;
  std::vector<std::string> header;
  for (const std::string_view line : lines(text)) {
    ++line_no;
    const std::string t = trim(line);
    if (t.empty()) continue;
    const std::string where = "trace '" + path + "' line " + std::to_string(line_no);
    Fields f;
    if (jsonl) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(t);
      } catch (const std::exception& e) {
        throw DataError(where + ": not valid JSON (" + e.what() + ")");
      }
      if (!j.is_object()) throw DataError(where + ": expected a JSON object");
      auto number = [&](const char* key, bool& has, double& v) {
        if (!j.contains(key)) return;
        if (!j[key].is_number()) throw DataError(where + ": " + key + " must be a number");
        has = true;
        v = j[key].get<double>();
      };
      number("arrival_step", f.has_arrival_step, f.arrival_step);
      number("arrival_time", f.has_arrival_time, f.arrival_time);
      number("prompt_len", f.has_prompt, f.prompt);
      number("decode_len", f.has_decode, f.decode);
      if (j.contains("request_id")) {
        if (!j["request_id"].is_number_unsigned()) {
          throw DataError(where + ": request_id must be a non-negative integer");
        }
        f.has_id = true;
        f.id = j["request_id"].get<uint64_t>();
      }
    } else {
      if (t[0] == '#') continue;
      if (header.empty()) {
        header = split(t, ',');
        continue;
      }
      const auto cells = split(t, ',');
      if (cells.size() != header.size()) {
        throw DataError(where + ": " + std::to_string(cells.size()) + " fields but the header has " +
                        std::to_string(header.size()));
      }
      for (size_t c = 0; c < cells.size(); ++c) {
        auto number = [&]() {
          try {
            return parse_double(cells[c], header[c]);
          } catch (const UsageError& e) {
            throw DataError(where + ": " + e.what());
          }
        };
        if (header[c] == "arrival_step") {
          f.has_arrival_step = true, f.arrival_step = number();
        } else if (header[c] == "arrival_time") {
          f.has_arrival_time = true, f.arrival_time = number();
        } else if (header[c] == "prompt_len") {
          f.has_prompt = true, f.prompt = number();
        } else if (header[c] == "decode_len") {
          f.has_decode = true, f.decode = number();
        } else if (header[c] == "request_id") {
          try {
            f.has_id = true, f.id = parse_uint64(cells[c], "request_id");
          } catch (const UsageError& e) {
            throw DataError(where + ": " + e.what());
          }
        }
      }
    }
    RequestSpec r = to_spec(f, out.size(), where);
    if (!ids.insert(r.id).second) throw DataError(where + ": duplicate request_id " + std::to_string(r.id));
    out.push_back(r);
  }
  if (out.empty()) throw DataError("trace '" + path + "' holds no requests");
  return out;
}

}  // namespace moe::sim
