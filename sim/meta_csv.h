// Token metadata for replayed logits: which request and position each logits row belongs to.
#pragma once

#include <string>
#include <vector>

#include "router/token_meta.h"

namespace moe::sim {

// Reads a CSV with the header `request_id,position` and one row per token. Throws DataError naming the file
// and line for a missing or different header, a bad number, or (when expected_rows >= 0) a row count other
// than expected_rows.
// The file is read with read_input_file (a missing path or a directory is named as such).
std::vector<TokenMeta> read_meta_csv(const std::string& path, long long expected_rows = -1);

// Parses the text of a meta CSV (for tests and the fuzzer); `name` appears in messages as the path would.
std::vector<TokenMeta> parse_meta_csv(const std::string& text, const std::string& name,
                                      long long expected_rows = -1);

}  // namespace moe::sim
