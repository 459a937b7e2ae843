# The CUDA settings every CUDA target of the project shares (included by the top level once nvcc is found):
# CCCL (CUB, Thrust, libcu++), OpenMP for the planner's CPU build, nvcc's C++20 flag, and moe_cuda_flags, the
# compile options of the project's own CUDA code. NOTES: CMake has no CUDA::cub; CCCL comes from the toolkit's
# CCCL package config.
find_package(CCCL CONFIG REQUIRED HINTS ${CUDAToolkit_LIBRARY_DIR}/cmake /usr/local/cuda/lib64/cmake)
find_package(OpenMP COMPONENTS CXX)

# NOTES: CMake 3.25 does not know nvcc's C++20 flag (the top level asks for CUDA 20, and router/ headers use
# C++20 defaulted comparisons), so name it here.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

# NOTES: warnings are errors for nvcc too; -fmad=false keeps nvcc from contracting a*b+c in the planner and the
# router rules (their float and double arithmetic must match the CPU's -ffp-contract=off bit for bit); the GEMM
# kernels call fmaf explicitly where they want fused operations. (moe_flags guards its own options with
# $<COMPILE_LANGUAGE:CXX>, so both can be linked.)
add_library(moe_cuda_flags INTERFACE)
target_compile_options(moe_cuda_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --Werror all-warnings -fmad=false>)
