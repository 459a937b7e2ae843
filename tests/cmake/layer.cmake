# moe/layer: accuracy against float64 (unit), behaviour (unit), bit equality (invariance).
moe_add_test(NAME layer_accuracy_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_accuracy_test.cc
             LIBS moe_layer LABELS unit)
moe_add_test(NAME layer_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_test.cc
             ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc LIBS moe_layer LABELS "unit;threaded")
moe_add_test(NAME layer_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_invariance_test.cc
             LIBS moe_layer LABELS "invariance;threaded")
