# sim/quality: `moe-sim quality`, what a capacity factor costs in quality on the trained model. quality_test
# (unit): the dropless perplexity against a float64 forward written for the test (tests/quality_reference.h),
# the comparison with dropless, the metrics, windows, reports and named errors; quality_invariance_test
# (invariance, threaded: make tsan runs it): the same bytes for any thread count, stable's text metrics
# independent of the traffic. Both read the held-out text of the fixture kjv_corpus (tests/cmake/model.cmake).
if(NOT TARGET moe_sim_quality)  # MOE_BUILD_SIM off, or no moe/model
  return()
endif()
moe_add_test(NAME quality_test SOURCES ${PROJECT_SOURCE_DIR}/tests/quality_test.cc
             LIBS moe_sim_quality nlohmann_json::nlohmann_json LABELS unit)
moe_add_test(NAME quality_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/quality_invariance_test.cc
             LIBS moe_sim_quality LABELS invariance threaded)
foreach(t quality_test quality_invariance_test)
  target_compile_definitions(${t} PRIVATE MOE_SOURCE_DIR="${PROJECT_SOURCE_DIR}" MOE_KJV_CORPUS="${CMAKE_BINARY_DIR}/kjv")
  set_tests_properties(${t} PROPERTIES FIXTURES_REQUIRED kjv_corpus)
endforeach()
set_tests_properties(quality_invariance_test PROPERTIES PROCESSORS 2)
