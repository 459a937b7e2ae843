// Small text helpers shared by the parsers: splitting, trimming and checked number parsing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe::sim {

std::vector<std::string> split(std::string_view s, char sep);
// The lines of `text` (split at '\n'; a final line without '\n' counts; no trailing empty line), as views
// into `text`.
std::vector<std::string_view> lines(std::string_view text);
std::string trim(std::string_view s);
// Whole-string parses; throw UsageError "<what>: expected an integer, got '<s>'" (or a number).
int64_t parse_int(std::string_view s, std::string_view what);
uint64_t parse_uint64(std::string_view s, std::string_view what);
double parse_double(std::string_view s, std::string_view what);
bool parse_bool(std::string_view s, std::string_view what);
// The byte offset of the first byte of `s` that is not part of well-formed UTF-8 (no overlong forms, no
// surrogates, at most U+10FFFF), or -1 if all of `s` is well-formed.
int64_t utf8_error_offset(std::string_view s);
// Shortest text that reads back as the same double ("1.25", "0.1", "3").
std::string format_double(double v);

}  // namespace moe::sim
