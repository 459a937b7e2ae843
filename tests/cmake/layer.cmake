# moe/layer: accuracy against float64 (unit), behaviour (unit), bit equality (invariance).
moe_add_test(NAME layer_accuracy_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_accuracy_test.cc
             LIBS moe_layer LABELS unit)
moe_add_test(NAME layer_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_test.cc
             ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc LIBS moe_layer LABELS "unit;threaded")
moe_add_test(NAME layer_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_invariance_test.cc
             LIBS moe_layer LABELS "invariance;threaded")
add_executable(runtime_example ${PROJECT_SOURCE_DIR}/tests/runtime_example.cc)
target_link_libraries(runtime_example PRIVATE moe_layer moe_flags)
add_test(NAME runtime_example COMMAND runtime_example)
set_tests_properties(runtime_example PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "bitwise equal")
