# moe/model and sim/diverge: the small MoE decoder (accuracy: unit; bit equality: invariance) and the
# divergence lab (serving simulator and the experiment's headline assertions).
# sim/diverge is normally added by sim/CMakeLists.txt; until then it is built from here.
if(NOT TARGET moe_sim_diverge AND TARGET moe_sim)
  add_subdirectory(${PROJECT_SOURCE_DIR}/sim/diverge ${CMAKE_BINARY_DIR}/sim_diverge)
endif()

moe_add_test(NAME model_accuracy_test SOURCES ${PROJECT_SOURCE_DIR}/tests/model_accuracy_test.cc
             LIBS moe_model LABELS unit)
moe_add_test(NAME model_weights_test SOURCES ${PROJECT_SOURCE_DIR}/tests/model_weights_test.cc
             LIBS moe_model LABELS unit)
moe_add_test(NAME model_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/model_invariance_test.cc
             LIBS moe_model LABELS invariance)
if(NOT TARGET moe_sim_diverge)  # MOE_BUILD_SIM off
  return()
endif()
moe_add_test(NAME diverge_test SOURCES ${PROJECT_SOURCE_DIR}/tests/diverge_test.cc
             LIBS moe_sim_diverge LABELS unit)
moe_add_test(NAME diverge_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/diverge_invariance_test.cc
             LIBS moe_sim_diverge LABELS invariance)
