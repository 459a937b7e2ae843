# moe/layer: behaviour (unit), the bf16 storage bound (unit), and the backend harness: one table of cases on
# every backend present, accuracy against float64 (unit) apart from bit equality (invariance).
moe_add_test(NAME layer_accuracy_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_accuracy_test.cc
             LIBS moe_layer LABELS unit)
# Every MoE family from a checkpoint directory alone, against the float64 reference of its published block.
moe_add_test(NAME layer_families_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_families_test.cc
             LIBS moe_layer LABELS unit)
# Every MoE architecture llama.cpp writes, from a GGUF file alone, against the same float64 family blocks.
moe_add_test(NAME layer_gguf_families_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_gguf_families_test.cc
             LIBS moe_layer LABELS unit)
moe_add_test(NAME layer_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_test.cc
             ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc LIBS moe_layer LABELS "unit;threaded")

# The harness binary holds the CPU backend and, in CUDA builds, the CUDA backend (whose cases skip, naming the
# reason, without a device). Each ctest entry runs one kind of test on one backend (gtest filters).
add_executable(layer_cases_test ${PROJECT_SOURCE_DIR}/tests/layer_cases_test.cc)
target_include_directories(layer_cases_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(layer_cases_test PRIVATE moe_layer GTest::gtest GTest::gtest_main moe_flags)
if(TARGET moe_cuda_layer)
  target_link_libraries(layer_cases_test PRIVATE moe_cuda_layer)
  target_compile_definitions(layer_cases_test PRIVATE MOE_LAYER_CASES_CUDA=1)
endif()
set(moe_layer_cases_invariance "*LayerCaseInvariance*:*LayerCaseChunking*:*LayerCaseCounterCheck*")
foreach(backend cpu cuda)
  if(backend STREQUAL "cuda" AND NOT TARGET moe_cuda_layer)
    continue()
  endif()
  string(REPLACE "*:" "*${backend}_*:" invariance_filter "${moe_layer_cases_invariance}*${backend}_*")
  set(prefix layer_cases)
  set(extra_label threaded)
  if(backend STREQUAL "cuda")
    set(prefix layer_cases_cuda)
    set(extra_label gpu)
  endif()
  add_test(NAME ${prefix}_accuracy COMMAND layer_cases_test --gtest_filter=*LayerCaseAccuracy*${backend}_*)
  add_test(NAME ${prefix}_invariance COMMAND layer_cases_test --gtest_filter=${invariance_filter})
  if(backend STREQUAL "cuda")
    set_tests_properties(${prefix}_accuracy PROPERTIES LABELS gpu TIMEOUT 300)
  else()
    set_tests_properties(${prefix}_accuracy PROPERTIES LABELS unit TIMEOUT 300)
  endif()
  set_tests_properties(${prefix}_invariance PROPERTIES LABELS "invariance;${extra_label}" TIMEOUT 600)
  if(extra_label STREQUAL "threaded")
    moe_label_threaded(TARGET layer_cases_test TESTS ${prefix}_invariance)
  endif()
  if(backend STREQUAL "cuda")
    set_tests_properties(${prefix}_accuracy ${prefix}_invariance PROPERTIES
                         SKIP_REGULAR_EXPRESSION "no usable CUDA device")
  endif()
endforeach()
add_executable(runtime_example ${PROJECT_SOURCE_DIR}/tests/runtime_example.cc)
target_link_libraries(runtime_example PRIVATE moe_layer moe_flags)
add_test(NAME runtime_example COMMAND runtime_example)
set_tests_properties(runtime_example PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "bitwise equal")
