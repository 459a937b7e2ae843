// safetensors header and tensor table (moe/io/safetensors.h), through the real entry point (a file, mapped):
// every tensor it lists lies inside the file and has prod(shape) x element size bytes, or the file is refused
// with std::invalid_argument (contents) / io::IoError (the OS).
#include <stdexcept>

#include "fuzz/fuzz_util.h"
#include "moe/io/safetensors.h"

namespace {

size_t element_size(moe::kernels::DType d) {
  return d == moe::kernels::DType::kF32 ? 4 : 2;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = moe::fuzz::write_scratch("fuzz.safetensors", moe::fuzz::as_string(data, size));
  try {
    const moe::io::SafetensorsFile file(path);
    for (const std::string& name : file.names()) {
      MOE_FUZZ_CHECK(file.contains(name));
      (void)file.file_dtype(name);
      const moe::io::TensorInfo* t = nullptr;
      try {
        t = file.find(name);
      } catch (const std::invalid_argument&) {
        continue;  // an unsupported dtype: listed, refused when requested
      }
      MOE_FUZZ_CHECK(t != nullptr && t->name == name);
      uint64_t count = 1;
      for (int64_t d : t->shape) {
        MOE_FUZZ_CHECK(d >= 0);
        count *= static_cast<uint64_t>(d);
      }
      MOE_FUZZ_CHECK(t->nbytes == count * element_size(t->dtype));
      MOE_FUZZ_CHECK(t->nbytes <= size);
      // Touch the first and last byte: a tensor outside the mapping faults here.
      if (t->nbytes > 0) {
        volatile std::byte first = t->data[0], last = t->data[t->nbytes - 1];
        (void)first;
        (void)last;
      }
    }
  } catch (const std::invalid_argument&) {
  } catch (const moe::io::IoError&) {
  }
  return 0;
}
