# CUDA backend tests. Label unit: host-side logic and the planner's algorithm on Thrust's OpenMP backend (they
# run everywhere). Label gpu: they need a device and GTEST_SKIP, naming the reason, when there is none.
# Accuracy (relative error against float64) and determinism (bitwise) tests are separate programs.
if(TARGET moe_plan_omp)
  moe_add_test(NAME cuda_plan_omp_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/cuda_plan_omp_test.cc
    LIBS moe_plan_omp moe_router
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

# The GPU layer (moe/gpu): host-side behaviour everywhere (unit); accuracy and bit equality on a GPU.
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
endif()
