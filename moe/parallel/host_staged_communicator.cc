#include "moe/parallel/host_staged_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <numeric>
#include <stdexcept>

namespace moe::parallel {
namespace {

void check(cudaError_t error, const std::string& prefix, const char* call) {
  if (error != cudaSuccess) {
    throw std::runtime_error(prefix + call + " failed: " + cudaGetErrorName(error) + ": " +
                             cudaGetErrorString(error));
  }
}

size_t total(std::span<const size_t> bytes) {
  return std::accumulate(bytes.begin(), bytes.end(), size_t{0});
}

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(Communicator& device_comm, int cuda_device)
    : device_comm_(device_comm), cuda_device_(cuda_device) {
  if (device_comm_.memory_space() != MemorySpace::kCudaDevice) {
    throw std::invalid_argument("staged: the wrapped communicator '" + device_comm_.name() + "' works on " +
                                std::string(to_string(device_comm_.memory_space())) +
                                " memory; staging is for device-memory communicators");
  }
  if (cuda_device < 0) throw std::invalid_argument("staged: cuda_device must be >= 0");
}

HostStagedCommunicator::~HostStagedCommunicator() {
  cudaSetDevice(cuda_device_);
  if (send_ != nullptr) cudaFree(send_);
  if (recv_ != nullptr) cudaFree(recv_);
}

void HostStagedCommunicator::abort(std::string_view reason) {
  device_comm_.abort(reason);
  std::abort();  // not reached: Communicator::abort never returns
}

void HostStagedCommunicator::reserve(size_t send_bytes, size_t recv_bytes) {
  const std::string prefix = "staged: ";
  check(cudaSetDevice(cuda_device_), prefix, "cudaSetDevice");
  if (send_bytes > send_capacity_) {
    if (send_ != nullptr) check(cudaFree(send_), prefix, "cudaFree");
    send_ = nullptr;
    send_capacity_ = 0;
    check(cudaMalloc(&send_, send_bytes), prefix, "cudaMalloc");
    send_capacity_ = send_bytes;
  }
  if (recv_bytes > recv_capacity_) {
    if (recv_ != nullptr) check(cudaFree(recv_), prefix, "cudaFree");
    recv_ = nullptr;
    recv_capacity_ = 0;
    check(cudaMalloc(&recv_, recv_bytes), prefix, "cudaMalloc");
    recv_capacity_ = recv_bytes;
  }
}

void HostStagedCommunicator::copy(void* dst, const void* src, size_t bytes, bool to_device, const char* op) {
  if (bytes == 0) return;
  check(cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost),
        error_prefix(op), "cudaMemcpy");
}

void HostStagedCommunicator::do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                                             std::span<const size_t> recv_bytes) {
  const size_t recv_total = total(recv_bytes);
  reserve(send_bytes, recv_total);
  copy(send_, send, send_bytes, true, "all_gather_v");
  device_comm_.all_gather_v(send_bytes ? send_ : nullptr, send_bytes, recv_total ? recv_ : nullptr,
                            recv_bytes);
  copy(recv, recv_, recv_total, false, "all_gather_v");
}

void HostStagedCommunicator::do_all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                                             std::span<const size_t> recv_bytes) {
  const size_t send_total = total(send_bytes), recv_total = total(recv_bytes);
  reserve(send_total, recv_total);
  copy(send_, send, send_total, true, "all_to_all_v");
  device_comm_.all_to_all_v(send_total ? send_ : nullptr, send_bytes, recv_total ? recv_ : nullptr,
                            recv_bytes);
  copy(recv, recv_, recv_total, false, "all_to_all_v");
}

void HostStagedCommunicator::do_broadcast(void* data, size_t bytes, int root) {
  reserve(bytes, 0);
  copy(send_, data, bytes, true, "broadcast");
  device_comm_.broadcast(bytes ? send_ : nullptr, bytes, root);
  copy(data, send_, bytes, false, "broadcast");
}

}  // namespace moe::parallel
