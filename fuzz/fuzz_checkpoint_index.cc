// Checkpoint index JSON (moe/io/checkpoint.h): the input is model.safetensors.index.json of a directory that
// also holds two valid shards, a.safetensors (x: F32 [2], y: BF16 [1, 2]) and b.safetensors (z: F16 [3]).
// Opening gives a checkpoint whose every listed tensor is found in its shard or refused by name, or the index
// is refused with std::invalid_argument / io::IoError; no shard path leaves the directory.
#include <array>
#include <stdexcept>

#include "fuzz/fuzz_util.h"
#include "moe/io/checkpoint.h"

namespace {

const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = moe::fuzz::scratch_dir() / "ckpt";
    std::filesystem::create_directories(d);
    const std::array<std::byte, 8> x{};
    const std::array<std::byte, 4> y{};
    const std::array<std::byte, 6> z{};
    const moe::io::TensorToWrite a[] = {{"x", "F32", {2}, x}, {"y", "BF16", {1, 2}, y}};
    const moe::io::TensorToWrite b[] = {{"z", "F16", {3}, z}};
    moe::io::write_safetensors(d / "a.safetensors", a);
    moe::io::write_safetensors(d / "b.safetensors", b);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path& dir = checkpoint_dir();
  {
    std::ofstream out(dir / "model.safetensors.index.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const moe::io::Checkpoint ckpt(dir);
    MOE_FUZZ_CHECK(!ckpt.shards().empty() && ckpt.shards().size() <= 2);
    for (const auto& shard : ckpt.shards()) {
      const auto name = shard.path().filename();
      MOE_FUZZ_CHECK(name == "a.safetensors" || name == "b.safetensors");
    }
    for (const std::string& name : ckpt.names()) {
      MOE_FUZZ_CHECK(ckpt.contains(name));
      try {
        const moe::io::TensorInfo& t = ckpt.get(name);
        MOE_FUZZ_CHECK(t.name == name && (name == "x" || name == "y" || name == "z"));
      } catch (const std::invalid_argument&) {
        // listed in the index but absent from its shard
      }
    }
  } catch (const std::invalid_argument&) {
  } catch (const moe::io::IoError&) {
  }
  return 0;
}
