# CUDA backend tests. Label unit: host-side logic and the planner's algorithm on Thrust's OpenMP backend (run
# everywhere). Label gpu: need a device and GTEST_SKIP with the reason when there is none.
if(TARGET moe_plan_omp)
  moe_add_test(NAME cuda_plan_omp_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/cuda_plan_omp_test.cc
    LIBS moe_plan_omp moe_router
    LABELS unit)
endif()
if(TEST cuda_plan_omp_test)
  # NOTES: OpenMP's default active spinning makes each of the planner's many short parallel regions crawl on
  # a shared, oversubscribed CI machine; passive waiting keeps two threads (and real races) cheap.
  set_tests_properties(cuda_plan_omp_test PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
endif()
