# CUDA benchmarks (need a device; they exit with a message when there is none). scripts/gpu-check.sh runs them.
if(TARGET moe_cuda_layer)
  moe_add_bench(NAME cuda_moe_bench SOURCES ${PROJECT_SOURCE_DIR}/bench/cuda_moe_bench.cc
    LIBS moe_cuda_layer moe_router_cuda moe_kernels_cuda moe_router)
endif()
