// moe-sim inspect FILE.gguf: what a GGUF file (single or split) holds, from its header alone (metadata and
// tensor infos; no tensor data is read): the format and file type, the family llama.cpp's architecture name
// maps to, the layers and which are MoE, the router's semantics, the MoE layer's tensors with their types and
// shapes as llama.cpp names them, each MoE layer's bytes as stored and dequantized to bf16 and f32, and what
// this project loads of it - or the refusal, naming the key or the tensor.
#pragma once

#include <filesystem>
#include <ostream>

namespace moe::sim {

// Writes the report of `path` (a .gguf file, or any shard of a split one) to `out`. A file that does not
// parse, or that this project refuses, is reported with the reason, not thrown (a file that cannot be opened
// throws io::IoError). Returns 0 when every MoE layer loads here, 1 otherwise.
int inspect_gguf(const std::filesystem::path& path, std::ostream& out);

}  // namespace moe::sim
