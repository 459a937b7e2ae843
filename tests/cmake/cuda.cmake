# CUDA backend tests. Label unit: host-side logic and the planner's algorithm on Thrust's OpenMP backend (they
# run everywhere). Label gpu: they need a device and GTEST_SKIP, naming the reason, when there is none.
# Accuracy (relative error against float64) and determinism (bitwise) tests are separate programs.
if(TARGET moe_plan_omp)
  moe_add_test(NAME cuda_plan_omp_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/cuda_plan_omp_test.cc
    LIBS moe_plan_omp moe_router moe_serving
    LABELS unit)
  # NOTES: OpenMP's default active spinning makes each of the planner's many short parallel regions crawl on
  # a shared, oversubscribed CI machine; passive waiting keeps two threads (and real races) cheap.
  set_tests_properties(cuda_plan_omp_test PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
endif()

if(TARGET moe_kernels_cuda)
  foreach(name cuda_plan_gpu_test cuda_topk_gpu_test cuda_ffn_accuracy_test cuda_ffn_invariance_test
      cuda_moe_pipeline_gpu_test)
    moe_add_test(NAME ${name}
      SOURCES ${PROJECT_SOURCE_DIR}/tests/${name}.cc
      LIBS moe_router_cuda moe_kernels_cuda moe_router
      LABELS gpu)
    # Without a device every case skips; report the program as skipped rather than passed.
    set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "no usable CUDA device")
  endforeach()
endif()

# The GPU layer (moe/cuda): host-side behaviour everywhere (unit); accuracy and bit equality on a GPU.
if(TARGET moe_cuda_layer)
  moe_add_test(NAME cuda_layer_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/cuda_layer_test.cc
    LIBS moe_cuda_layer
    LABELS unit)
  moe_add_test(NAME cuda_layer_gpu_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/cuda_layer_gpu_test.cc
    LIBS moe_cuda_layer
    LABELS gpu)
  set_tests_properties(cuda_layer_gpu_test PROPERTIES SKIP_REGULAR_EXPRESSION "no usable CUDA device")
  # Stream ordering of uploads, weights on another stream, activations in place (issue 16's hazards on a GPU).
  moe_add_test(NAME cuda_stream_order_gpu_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/cuda_stream_order_gpu_test.cc
    LIBS moe_cuda_layer moe_kernels_cuda
    LABELS gpu)
  set_tests_properties(cuda_stream_order_gpu_test PROPERTIES SKIP_REGULAR_EXPRESSION "no usable CUDA device")
endif()

# Code-level checks of the stream-ordering and aliasing rules (no GPU, no CUDA build needed).
add_test(NAME cuda_hazards_check COMMAND ${CMAKE_COMMAND} -DMOE_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                                         -P ${PROJECT_SOURCE_DIR}/tests/cuda_hazards_check.cmake)
set_tests_properties(cuda_hazards_check PROPERTIES LABELS unit TIMEOUT 60)

# The GPU bundle: scripts/gpu-check.sh's build step from gpu-bundle/ only (system copies hidden) builds the CUDA
# layer and cuda_layer_test (tests/gpu_bundle_test.sh). One CUDA architecture (sm_90) keeps it to a few minutes
# on two cores; it skips without the bundle (make deps fetches it) or without nvcc.
if(MOE_ENABLE_CUDA)
  add_test(NAME gpu_bundle_build_test
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/gpu_bundle_test.sh ${PROJECT_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR}/gpu-bundle-test 90)
  set_tests_properties(gpu_bundle_build_test PROPERTIES LABELS unit TIMEOUT 1800 SKIP_RETURN_CODE 77
                       PROCESSORS 2)
endif()
