// The stream-ordering and aliasing hazards of issue 16, where only a GPU can show them (the code-level rules
// are tests/cuda_hazards_check.cmake): data uploaded from pageable memory is in place for a kernel launched
// at once on a non-blocking stream; a layer's weights are visible to forward_device() on a stream other than
// its own, right after construction; SwiGLU and GELU in place give the bits of the out-of-place call.
// Skips naming the reason without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/cuda/check.h"
#include "base/cuda/device_buffer.h"
#include "kernels/bf16.h"
#include "kernels/cuda/expert_ffn.h"
#include "moe/cuda/cuda_moe_layer.h"
#include "tests/cuda_gpu_test_util.h"
#include "tests/support/layer_fixtures.h"
#include "tests/support/layer_probe.h"

namespace moe {
namespace {

struct Stream {
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

// 64 MB per upload, large enough that a copy still in flight would be seen by the kernel right after it.
constexpr size_t kCount = size_t{1} << 24;

void ExpectCastMatches(const std::vector<float>& host, const cuda::DeviceBuffer<uint16_t>& out, int round) {
  std::vector<uint16_t> got(kCount);
  out.download(got.data(), kCount);
  size_t bad = 0;
  for (size_t i = 0; i < kCount; ++i) bad += got[i] != kernels::f32_to_bf16(host[i]);
  EXPECT_EQ(bad, 0u) << "round " << round << ": elements the kernel read before the upload landed";
}

TEST(CudaStreamOrder, SynchronousUploadIsInPlaceForANonBlockingStream) {
  MOE_REQUIRE_GPU();
  Stream stream;
  cuda::DeviceBuffer<float> in(kCount);
  cuda::DeviceBuffer<uint16_t> out(kCount);
  std::vector<float> host(kCount);
  for (int round = 0; round < 6; ++round) {
    for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>((i * 2654435761u + round) % 65536);
    in.upload(host);  // pageable memory, no stream: complete for every stream on return
    cuda::cast_to_bf16(in.data(), kCount, out.data(), stream.s);
    CUDA_CHECK(cudaStreamSynchronize(stream.s));
    ExpectCastMatches(host, out, round);
  }
}

TEST(CudaStreamOrder, StreamUploadIsOrderedBeforeTheKernel) {
  MOE_REQUIRE_GPU();
  Stream stream;
  cuda::DeviceBuffer<float> in(kCount);
  cuda::DeviceBuffer<uint16_t> out(kCount);
  std::vector<float> host(kCount);
  for (int round = 0; round < 6; ++round) {
    for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>((i * 40503u + 7 * round) % 65536);
    in.upload(host, stream.s);
    cuda::cast_to_bf16(in.data(), kCount, out.data(), stream.s);
    std::vector<uint16_t> got(kCount);
    out.download(got.data(), kCount, stream.s);  // ordered after the kernel on the same stream
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i) bad += got[i] != kernels::f32_to_bf16(host[i]);
    EXPECT_EQ(bad, 0u) << "round " << round;
  }
}

TEST(CudaStreamOrder, LayerWeightsAreVisibleOnAnotherStreamAtOnce) {
  MOE_REQUIRE_GPU();
  constexpr int64_t kHidden = 256;
  auto weights = testing::RandomWeights(testing::SmallShape(kHidden, 512, 8), kernels::DType::kF32, 31);
  MoELayerConfig config = testing::SmallConfig("deterministic", 8, 2);
  config.max_tokens = 64;
  std::vector<TokenMeta> meta;
  for (uint32_t i = 0; i < 64; ++i) meta.push_back({i % 5, i / 5});
  const testing::Batch b = testing::MakeBatch(meta, kHidden);
  cuda::DeviceBuffer<float> x(b.x.size()), y(b.x.size());
  cuda::DeviceBuffer<TokenMeta> m(meta.size());
  x.upload(b.x);
  m.upload(meta);
  Stream other;
  std::vector<float> reference;
  for (int round = 0; round < 4; ++round) {
    CudaMoELayer layer(config, weights);  // uploads its weights; forward_device follows on another stream
    layer.forward_device(x.data(), 64, m.data(), y.data(), other.s);
    layer.check_device_errors(other.s);
    std::vector<float> got(b.x.size());
    y.download(got.data(), got.size(), other.s);
    if (round == 0)
      reference = testing::Forward(layer, b);  // forward(): the layer's own stream, synchronised
    EXPECT_TRUE(testing::BitEqual(got, reference)) << "round " << round;
  }
}

TEST(CudaActivations, InPlaceGivesTheBitsOfOutOfPlace) {
  MOE_REQUIRE_GPU();
  Stream stream;
  const int rows = 300, ffn = 1000;
  const size_t n = static_cast<size_t>(rows) * ffn;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> gate(n), up(n);
  for (float& v : gate) v = normal(rng);
  for (float& v : up) v = normal(rng);
  const std::vector<int32_t> offsets = {0, 120, 120, rows};
  cuda::DeviceBuffer<float> d_gate(n), d_up(n), d_out(n);
  cuda::DeviceBuffer<int32_t> d_offsets(offsets.size());
  d_offsets.upload(offsets, stream.s);
  for (bool gelu : {false, true}) {
    d_gate.upload(gate, stream.s);
    d_up.upload(up, stream.s);
    if (gelu) {
      cuda::gelu_rows(d_up.data(), ffn, d_offsets.data(), 3, rows, d_out.data(), nullptr, stream.s);
      cuda::gelu_rows(d_up.data(), ffn, d_offsets.data(), 3, rows, d_up.data(), nullptr, stream.s);
    } else {
      cuda::swiglu_rows(d_gate.data(), d_up.data(), ffn, d_offsets.data(), 3, rows, d_out.data(), nullptr,
                        stream.s);
      cuda::swiglu_rows(d_gate.data(), d_up.data(), ffn, d_offsets.data(), 3, rows, d_up.data(), nullptr,
                        stream.s);  // in place, into up (the fast path's use)
    }
    std::vector<float> out(n), in_place(n);
    d_out.download(out.data(), n, stream.s);
    d_up.download(in_place.data(), n, stream.s);
    EXPECT_EQ(std::memcmp(out.data(), in_place.data(), n * sizeof(float)), 0) << (gelu ? "gelu" : "swiglu");
  }
}

}  // namespace
}  // namespace moe
