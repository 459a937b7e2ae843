// Writes every family case's checkpoint (tests/support/family_checkpoints.h) under OUT/<name>/, with the
// inputs and float64 references the C and Python tests compare against:
//   OUT/families.txt        one line per case: name model_type quantization layer tokens hidden tolerance
//                           (tolerance: the per-row relative error allowed against y_stored,
//                           stored_tolerance)
//   OUT/<name>/x.bin        float32 [tokens, hidden] rows (6 requests, tests/support/layer_fixtures.h)
//   OUT/<name>/y_exact.bin  float64 [tokens, hidden]: the family's MoE block (family_reference.h), dropless,
//                           on the exact weights (what fp32 storage holds within 2^-24)
//   OUT/<name>/y_stored.bin the same on the weights the default storage holds: y_exact (a quantized file is
//                           held as stored, whose values are the exact ones; its kernels' activation rule
//                           is the error the C and Python tests allow it, tests/support/family_tolerance.h)
//   OUT/<name>/ties.bin     uint8 [tokens]: 1 where the reference's top-k choice is within 1e-6 of a tie
// and every GGUF family case (tests/support/family_gguf.h) under OUT/gguf/<name>/ (the .gguf file or its
// shards, and the same x.bin, y_exact.bin, y_stored.bin and ties.bin; the stored values of a GGUF file are
// its blocks' exact values, so y_stored is y_exact), listed in OUT/gguf/gguf.txt: name architecture
// tensor-type layer tokens hidden tolerance file (the tolerance as stored: gguf_stored_tolerance; the file:
// the first shard's name). Usage: write_family_checkpoints OUT
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "moe/io/gguf_types.h"
#include "tests/support/family_checkpoints.h"
#include "tests/support/family_gguf.h"
#include "tests/support/family_reference.h"
#include "tests/support/layer_fixtures.h"

namespace {

template <class T>
void write_binary(const std::filesystem::path& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out);
  std::ofstream manifest(out / "families.txt");
  for (const moe::testing::FamilyCase& c : moe::testing::family_cases()) {
    const std::filesystem::path dir = out / c.name;
    moe::testing::WrittenCheckpoint w = moe::testing::write_family_checkpoint(c, dir);
    std::vector<moe::TokenMeta> meta;
    for (uint32_t i = 0; i < 32; ++i) meta.push_back({i % 6, i / 6});
    const moe::testing::Batch b = moe::testing::MakeBatch(meta, w.ref.d);
    const int T = static_cast<int>(meta.size());
    std::vector<bool> ties;
    const std::vector<double> exact = moe::testing::family_reference(w, b.x, T, &ties);
    const std::vector<double>& stored = exact;
    write_binary(dir / "x.bin", b.x);
    write_binary(dir / "y_exact.bin", exact);
    write_binary(dir / "y_stored.bin", stored);
    std::vector<uint8_t> tie_bytes(ties.begin(), ties.end());
    write_binary(dir / "ties.bin", tie_bytes);
    manifest << c.name << " " << c.model_type << " " << moe::io::to_string(c.quant).substr(0, 4) << " "
             << w.layer << " " << T << " " << w.ref.d << " " << moe::testing::stored_tolerance(c) << "\n";
  }
  std::filesystem::create_directories(out / "gguf");
  std::ofstream gguf_manifest(out / "gguf" / "gguf.txt");
  size_t gguf_written = 0;
  for (const moe::testing::GgufFamilyCase& c : moe::testing::gguf_family_cases()) {
    const std::filesystem::path dir = out / "gguf" / c.name;
    const moe::testing::WrittenCheckpoint w = moe::testing::write_family_gguf(c, dir);
    std::vector<moe::TokenMeta> meta;
    for (uint32_t i = 0; i < 32; ++i) meta.push_back({i % 6, i / 6});
    const moe::testing::Batch b = moe::testing::MakeBatch(meta, w.ref.d);
    const int T = static_cast<int>(meta.size());
    std::vector<bool> ties;
    const std::vector<double> exact = moe::testing::family_reference(w, b.x, T, &ties);
    write_binary(dir / "x.bin", b.x);
    write_binary(dir / "y_exact.bin", exact);
    write_binary(dir / "y_stored.bin", exact);
    std::vector<uint8_t> tie_bytes(ties.begin(), ties.end());
    write_binary(dir / "ties.bin", tie_bytes);
    gguf_manifest << c.name << " " << c.arch << " " << moe::io::gguf_tensor_type_name(c.type) << " "
                  << w.layer << " " << T << " " << w.ref.d << " " << moe::testing::gguf_stored_tolerance(c)
                  << " " << w.dir.filename().string() << "\n";
    ++gguf_written;
  }
  std::printf("wrote %zu family checkpoints and %zu GGUF files under %s\n",
              moe::testing::family_cases().size(), gguf_written, out.c_str());
  return 0;
}
