# Code-level checks of the CUDA stream-ordering and aliasing rules, so that a CPU run catches what would only
# show on a GPU as a flaky result. Run as: cmake -DMOE_SOURCE_DIR=<root> -P tests/cuda_hazards_check.cmake
#
# 1. No synchronous legacy-stream copy or fill (cudaMemcpy, cudaMemcpy2D, cudaMemcpyPeer, cudaMemset) in the
#    library, tests or benchmarks: the project's streams are non-blocking, which the legacy default stream does
#    not order against, and a pageable cudaMemcpy may return before its DMA has landed. Copies are
#    cudaMemcpyAsync on the stream that uses the data, or DeviceBuffer's, which synchronise
#    (base/cuda/device_buffer.h, the one allowed place).
# 2. The NCCL communicator ends a group only in NcclCommunicator::end_group(), which waits until the group has
#    left ncclInProgress before anything dependent is enqueued.
# 3. The activation kernels that run in place (out_f32 may be an input) take no __restrict__ float pointers.
cmake_minimum_required(VERSION 3.24)
if(NOT MOE_SOURCE_DIR)
  message(FATAL_ERROR "cuda_hazards_check: pass -DMOE_SOURCE_DIR=<project root>")
endif()
set(problems "")

# 1 ---------------------------------------------------------------------------------------------------------
set(allowed "base/cuda/device_buffer.h")
set(checked 0)
foreach(area base kernels router moe bench tests)
  file(GLOB_RECURSE files RELATIVE ${MOE_SOURCE_DIR} ${MOE_SOURCE_DIR}/${area}/*.cc ${MOE_SOURCE_DIR}/${area}/*.cu
       ${MOE_SOURCE_DIR}/${area}/*.h ${MOE_SOURCE_DIR}/${area}/*.cuh)
  foreach(file ${files})
    if(file IN_LIST allowed)
      continue()
    endif()
    math(EXPR checked "${checked} + 1")
    file(STRINGS ${MOE_SOURCE_DIR}/${file} lines REGEX "cudaMem(cpy|cpy2D|cpyPeer|set)[ ]*\\(")
    foreach(line ${lines})
      string(STRIP "${line}" line)
      if(line MATCHES "^//")
        continue()
      endif()
      # cudaMemcpyAsync and friends do not match: the name must be followed directly by '('.
      string(APPEND problems "  ${file}: synchronous legacy-stream call: ${line}\n")
    endforeach()
  endforeach()
endforeach()
if(checked LESS 20)
  string(APPEND problems "  only ${checked} files scanned under ${MOE_SOURCE_DIR}: wrong source directory?\n")
endif()

# 2 ---------------------------------------------------------------------------------------------------------
set(nccl ${MOE_SOURCE_DIR}/moe/parallel/nccl_communicator.cc)
if(EXISTS ${nccl})
  file(READ ${nccl} text)
  string(REGEX MATCHALL "ncclGroupEnd[ ]*\\(" calls "${text}")
  list(LENGTH calls n)
  if(NOT n EQUAL 1)
    string(APPEND problems "  moe/parallel/nccl_communicator.cc: ncclGroupEnd called ${n} times (expected once, in end_group)\n")
  elseif(NOT text MATCHES "void NcclCommunicator::end_group\\(\\) {\n  NCCL_CHECK\\(ncclGroupEnd\\(\\)\\);\n  wait\\(op_, /\\*query_stream=\\*/false\\);")
    string(APPEND problems "  moe/parallel/nccl_communicator.cc: end_group() must call ncclGroupEnd and then wait(op_, false)\n")
  endif()
else()
  string(APPEND problems "  ${nccl} not found\n")
endif()

# 3 ---------------------------------------------------------------------------------------------------------
set(ffn ${MOE_SOURCE_DIR}/kernels/cuda/expert_ffn.cu)
file(READ ${ffn} text)
foreach(kernel swiglu_kernel gelu_kernel)
  string(REGEX MATCH "__global__ void ${kernel}\\([^{]*\\)" signature "${text}")
  if(NOT signature)
    string(APPEND problems "  kernels/cuda/expert_ffn.cu: ${kernel} not found\n")
  elseif(signature MATCHES "float\\* __restrict__")
    string(APPEND problems "  kernels/cuda/expert_ffn.cu: ${kernel} runs in place but has a __restrict__ float pointer: ${signature}\n")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "cuda_hazards_check: FAILED\n${problems}")
endif()
message(STATUS "cuda_hazards_check: ok (${checked} files: no legacy-stream copies; NCCL groups settled; in-place kernels unrestricted)")
