#include "moe/parallel/nccl_communicator.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <utility>

// NOTES: both macros are used inside NcclCommunicator members only: a failure aborts the NCCL
// communicator, marks the object broken and throws std::runtime_error with file:line and the call.
#define NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK(call) check_cuda((call), #call, __FILE__, __LINE__)

namespace moe::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// Sleep between polls: short at first (collectives of a few KB finish in microseconds), longer
// later so that a waiting rank does not take a core from its peers.
void back_off(int polls) {
  if (polls < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 200));
  }
}

std::string where(const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": ";
}

}  // namespace

void NcclCommunicator::check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  std::string message =
      error_prefix(op_) + where(file, line) + call + " failed: " + ncclGetErrorString(result);
  if (comm_ != nullptr) {
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
  }
  fail(message);
}

void NcclCommunicator::check_cuda(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return;
  fail(error_prefix(op_) + where(file, line) + call + " failed: " + cudaGetErrorName(error) + ": " +
       cudaGetErrorString(error));
}

void NcclCommunicator::fail(const std::string& message) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  broken_reason_ = message;
  throw std::runtime_error(message);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap,
                                                           const NcclConfig& config) {
  if (bootstrap.memory_space() != MemorySpace::kHost) {
    throw std::invalid_argument("nccl create: rank " + std::to_string(bootstrap.rank()) +
                                ": the bootstrap communicator must use host memory, '" + bootstrap.name() +
                                "' uses " + std::string(to_string(bootstrap.memory_space())));
  }
  validate(config.options);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      throw std::runtime_error("nccl create: rank 0: " + where(__FILE__, __LINE__) +
                               "ncclGetUniqueId failed: " + ncclGetErrorString(result));
    }
  }
  bootstrap.broadcast(&id, sizeof(id), 0);
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(id, bootstrap.rank(), bootstrap.size(), config, &bootstrap));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(std::unique_ptr<Communicator> bootstrap,
                                                           const NcclConfig& config) {
  if (bootstrap == nullptr) throw std::invalid_argument("nccl create: the bootstrap communicator is null");
  std::unique_ptr<NcclCommunicator> result = create(*bootstrap, config);
  result->owned_bootstrap_ = std::move(bootstrap);
  return result;
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create_from_file(const std::string& path, int rank,
                                                                     int size, const NcclConfig& config) {
  const std::string prefix =
      "nccl create_from_file: rank " + std::to_string(rank) + " of " + std::to_string(size) + ": ";
  if (size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument(prefix + "rank must be in [0, size) and size >= 1");
  }
  if (path.empty()) throw std::invalid_argument(prefix + "the unique id path is empty");
  validate(config.options);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      throw std::runtime_error(prefix + where(__FILE__, __LINE__) +
                               "ncclGetUniqueId failed: " + ncclGetErrorString(result));
    }
    // Written whole to a temporary and renamed, so a reader never sees a partial id.
    const std::string temp = path + ".tmp." + std::to_string(::getpid());
    std::FILE* file = std::fopen(temp.c_str(), "wb");
    if (file == nullptr)
      throw std::runtime_error(prefix + "cannot write '" + temp + "': " + std::strerror(errno));
    const bool written = std::fwrite(&id, sizeof(id), 1, file) == 1;
    const bool closed = std::fclose(file) == 0;
    std::error_code error;
    if (written && closed) std::filesystem::rename(temp, path, error);
    if (!written || !closed || error) {
      std::filesystem::remove(temp, error);
      throw std::runtime_error(prefix + "cannot write the unique id to '" + path + "'");
    }
  } else {
    const auto start = Clock::now();
    for (int polls = 0;; ++polls) {
      std::error_code error;
      if (std::filesystem::file_size(path, error) == sizeof(id) && !error) {
        std::FILE* file = std::fopen(path.c_str(), "rb");
        const bool read = file != nullptr && std::fread(&id, sizeof(id), 1, file) == 1;
        if (file != nullptr) std::fclose(file);
        if (read) break;
      }
      if (Clock::now() - start >= config.options.timeout) {
        throw std::runtime_error(prefix + "waited " + std::to_string(config.options.timeout.count()) +
                                 " ms for the unique id file '" + path +
                                 "'; rank 0 is dead, stuck or uses another path");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(polls < 100 ? 1 : 20));
    }
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(id, rank, size, config, nullptr));
}

NcclCommunicator::NcclCommunicator(const ncclUniqueId& id, int rank, int size, const NcclConfig& config,
                                   Communicator* bootstrap)
    : rank_(rank),
      size_(size),
      device_(config.device),
      stream_(config.stream),
      options_(config.options),
      bootstrap_(bootstrap),
      op_("init") {
  int num_devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&num_devices));
  if (device_ < 0 || device_ >= num_devices) {
    throw std::invalid_argument(error_prefix(op_) + "device " + std::to_string(device_) +
                                " is out of range: " + std::to_string(num_devices) + " CUDA devices");
  }
  CUDA_CHECK(cudaSetDevice(device_));
  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;  // setup and collectives return at once; wait() bounds them
  NCCL_CHECK(ncclCommInitRankConfig(&comm_, size_, id, rank_, &nccl_config));
  wait(op_, /*query_stream=*/false);
  CUDA_CHECK(cudaMalloc(&scratch_, (static_cast<size_t>(size_) + 1) * sizeof(size_t)));
  offsets_.resize(static_cast<size_t>(size_));
  size_counts_.assign(static_cast<size_t>(size_), sizeof(size_t));
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    const ncclResult_t result = ncclCommFinalize(comm_);
    bool finalized = result == ncclSuccess || result == ncclInProgress;
    const auto start = Clock::now();
    for (int polls = 0; finalized; ++polls) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) finalized = false;
      if (async == ncclSuccess) break;
      if (async != ncclInProgress || Clock::now() - start >= options_.timeout) finalized = false;
      back_off(polls);
    }
    if (finalized) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
}

void NcclCommunicator::abort(std::string_view reason) {
  std::fprintf(stderr, "moe::parallel abort (nccl, rank %d of %d): %.*s\n", rank_, size_,
               static_cast<int>(reason.size()), reason.data());
  std::fflush(stderr);
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (bootstrap_ != nullptr) bootstrap_->abort(reason);
  std::_Exit(EXIT_FAILURE);
}

void NcclCommunicator::begin(std::string_view op) {
  op_ = op;
  if (broken()) {
    throw std::runtime_error(error_prefix(op) + "communicator is broken by an earlier failure (" +
                             broken_reason_ + "); call abort()");
  }
  CUDA_CHECK(cudaSetDevice(device_));
}

void NcclCommunicator::wait(std::string_view op, bool query_stream) {
  const auto start = Clock::now();
  for (int polls = 0;; ++polls) {
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* last = ncclGetLastError(comm_);
      fail(error_prefix(op) + "NCCL asynchronous error: " + ncclGetErrorString(async) +
           (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string()));
    }
    if (async == ncclSuccess) {
      if (!query_stream) return;
      const cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) CUDA_CHECK(state);
    }
    if (Clock::now() - start >= options_.timeout) {
      fail("nccl " + std::string(op) + ": rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
           " waited " + std::to_string(options_.timeout.count()) + " ms; a peer is dead or stuck");
    }
    back_off(polls);
  }
}

void NcclCommunicator::do_all_gather_v(const void* send, size_t send_bytes, void* recv,
                                       std::span<const size_t> recv_bytes) {
  begin("all_gather_v");
  auto* out = static_cast<char*>(recv);
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    offsets_[r] = offset;
    offset += recv_bytes[r];
  }
  NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (send_bytes != 0) NCCL_CHECK(ncclSend(send, send_bytes, ncclUint8, peer, comm_, stream_));
    if (recv_bytes[peer] != 0) {
      NCCL_CHECK(ncclRecv(out + offsets_[peer], recv_bytes[peer], ncclUint8, peer, comm_, stream_));
    }
  }
  NCCL_CHECK(ncclGroupEnd());
  if (send_bytes != 0) {
    CUDA_CHECK(cudaMemcpyAsync(out + offsets_[rank_], send, send_bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  wait(op_);
}

void NcclCommunicator::do_all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                                       std::span<const size_t> recv_bytes) {
  begin("all_to_all_v");
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  size_t send_offset = 0;
  size_t recv_offset = 0;
  size_t self_send_offset = 0;
  NCCL_CHECK(ncclGroupStart());
  for (int peer = 0; peer < size_; ++peer) {
    offsets_[peer] = recv_offset;
    if (peer == rank_) {
      self_send_offset = send_offset;
    } else {
      if (send_bytes[peer] != 0) {
        NCCL_CHECK(ncclSend(in + send_offset, send_bytes[peer], ncclUint8, peer, comm_, stream_));
      }
      if (recv_bytes[peer] != 0) {
        NCCL_CHECK(ncclRecv(out + recv_offset, recv_bytes[peer], ncclUint8, peer, comm_, stream_));
      }
    }
    send_offset += send_bytes[peer];
    recv_offset += recv_bytes[peer];
  }
  NCCL_CHECK(ncclGroupEnd());
  if (send_bytes[rank_] != 0) {
    CUDA_CHECK(cudaMemcpyAsync(out + offsets_[rank_], in + self_send_offset, send_bytes[rank_],
                               cudaMemcpyDeviceToDevice, stream_));
  }
  wait(op_);
}

void NcclCommunicator::do_all_gather_sizes(size_t mine, std::span<size_t> out) {
  begin("all_gather_sizes");
  auto* device_sizes = static_cast<size_t*>(scratch_);
  CUDA_CHECK(cudaMemcpyAsync(device_sizes + size_, &mine, sizeof(size_t), cudaMemcpyHostToDevice, stream_));
  do_all_gather_v(device_sizes + size_, sizeof(size_t), device_sizes, size_counts_);
  op_ = "all_gather_sizes";
  CUDA_CHECK(cudaMemcpyAsync(out.data(), device_sizes, out.size_bytes(), cudaMemcpyDeviceToHost, stream_));
  wait(op_);
}

void NcclCommunicator::do_barrier() {
  begin("barrier");
  NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclUint64, ncclSum, comm_, stream_));
  wait(op_);
}

void NcclCommunicator::do_broadcast(void* data, size_t bytes, int root) {
  begin("broadcast");
  if (bytes == 0) return;  // the same on every rank by contract
  NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_));
  wait(op_);
}

}  // namespace moe::parallel
