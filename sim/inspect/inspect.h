// moe-sim inspect DIR | FILE.gguf: what a Hugging Face checkpoint directory holds (a GGUF file:
// inspect_gguf.h), read from config.json and the safetensors headers alone (no tensor data): the family, the
// layers and which are MoE, the router's semantics, the shapes and dtypes of an MoE layer, the memory one MoE
// layer takes as stored and in each storage dtype, and what this project supports of it (and, for what it
// refuses, the reason).
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <ostream>

namespace moe::sim {

// Writes the report of `dir` (a checkpoint directory or its config.json; a GGUF file goes to inspect_gguf) to
// `out`. A config this project
// refuses is reported with the refusal (and the tensors the weights hold), not thrown; a directory without
// config.json throws io::IoError. Returns 0 when the checkpoint's MoE layers load here, 1 otherwise.
int inspect_checkpoint(const std::filesystem::path& dir, std::ostream& out);

// Registers `inspect PATH` on the moe-sim command line; its callback prints the report to stdout and sets the
// returned status (inspect_checkpoint's) for main to exit with.
std::shared_ptr<int> add_inspect_command(CLI::App& app);

}  // namespace moe::sim
