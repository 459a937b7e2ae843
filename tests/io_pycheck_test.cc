// io_pycheck: the C++ half of io_python_safetensors_test.py (not a GoogleTest program).
//
// Usage: io_pycheck MANIFEST.json
// The manifest names a safetensors file written by Python, a Mixtral layer shape, and cases: for each
// requested storage dtype (or null for the file's own), the expected storage dtype and, for every matrix of
// the layer, a raw little-endian dump of the exact bytes the loaded view must hold. Exit status 0 when every
// byte matches.
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "moe/io/layer_weights.h"

namespace {

using moe::kernels::DType;
using moe::kernels::MatrixView;

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::kF32;
  if (s == "bf16") return DType::kBF16;
  throw std::invalid_argument("io_pycheck: bad dtype " + s);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("io_pycheck: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Compares the view's rows with the raw dump; prints the first mismatches. Returns the number of mismatches.
int compare(const std::string& label, const MatrixView& v, const std::string& want_dtype,
            const std::string& raw) {
  if (moe::kernels::to_string(v.dtype) != want_dtype) {
    std::cerr << label << ": dtype " << moe::kernels::to_string(v.dtype) << " but expected " << want_dtype
              << "\n";
    return 1;
  }
  const size_t esize = moe::kernels::dtype_size(v.dtype);
  if (raw.size() != static_cast<size_t>(v.rows * v.cols) * esize) {
    std::cerr << label << ": " << v.rows << "x" << v.cols << " view but dump has " << raw.size()
              << " bytes\n";
    return 1;
  }
  int bad = 0;
  for (int64_t r = 0; r < v.rows; ++r) {
    for (int64_t c = 0; c < v.cols; ++c) {
      const auto* got = static_cast<const char*>(v.data) + (r * v.row_stride + c) * esize;
      const char* want = raw.data() + (r * v.cols + c) * esize;
      if (std::memcmp(got, want, esize) != 0) {
        if (bad < 5) {
          uint32_t g = 0, w = 0;
          std::memcpy(&g, got, esize);
          std::memcpy(&w, want, esize);
          std::fprintf(stderr, "%s[%ld,%ld]: bits 0x%x but expected 0x%x\n", label.c_str(),
                       static_cast<long>(r), static_cast<long>(c), g, w);
        }
        ++bad;
      }
    }
  }
  return bad;
}

int run(const std::string& manifest_path) {
  const auto manifest = nlohmann::json::parse(slurp(manifest_path));
  moe::io::LayerShape shape;
  shape.hidden = manifest["shape"]["hidden"];
  shape.expert_ff = manifest["shape"]["expert_ff"];
  shape.num_experts = manifest["shape"]["num_experts"];
  const auto arch = moe::io::parse_architecture(manifest["arch"].get<std::string>());
  const int layer = manifest["layer"];
  const auto ckpt = moe::io::Checkpoint::open(manifest["file"].get<std::string>());
  int bad = 0, checked = 0;
  for (const auto& c : manifest["cases"]) {
    std::optional<DType> storage;
    if (!c["storage"].is_null()) storage = parse_dtype(c["storage"]);
    const moe::io::LayerWeights w = moe::io::load_layer(ckpt, arch, layer, shape, storage);
    const std::string case_label =
        "[storage " + (storage ? std::string(moe::kernels::to_string(*storage)) : "file") + "] ";
    if (moe::kernels::to_string(w.storage()) != c["expect_storage"].get<std::string>()) {
      std::cerr << case_label << "storage " << moe::kernels::to_string(w.storage()) << " but expected "
                << c["expect_storage"] << "\n";
      ++bad;
    }
    for (const auto& t : c["tensors"]) {
      const std::string kind = t["kind"];
      const MatrixView* v = nullptr;
      if (kind == "router") {
        v = &w.router_gate();
      } else {
        const auto& e = w.experts()[t["expert"].get<size_t>()];
        const std::string proj = t["proj"];
        v = proj == "w1" ? &e.gate_proj : proj == "w3" ? &e.up_proj : &e.down_proj;
      }
      bad += compare(case_label + t["name"].get<std::string>(), *v, t["dtype"], slurp(t["raw"]));
      ++checked;
    }
  }
  std::cout << "io_pycheck: " << checked << " tensors checked, " << bad << " mismatches\n";
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: io_pycheck MANIFEST.json\n";
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "io_pycheck: " << e.what() << "\n";
    return 1;
  }
}
