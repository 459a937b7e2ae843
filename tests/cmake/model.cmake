# moe/model and sim/diverge: the small MoE decoder (accuracy: unit; bit equality: invariance) and the
# divergence lab (serving simulator and the experiment's headline assertions).
# sim/diverge is normally added by sim/CMakeLists.txt; until then it is built from here.
if(NOT TARGET moe_sim_diverge)
  add_subdirectory(${PROJECT_SOURCE_DIR}/sim/diverge ${CMAKE_BINARY_DIR}/sim_diverge)
endif()

moe_add_test(NAME model_accuracy_test SOURCES ${PROJECT_SOURCE_DIR}/tests/model_accuracy_test.cc
             LIBS moe_model LABELS unit)
moe_add_test(NAME model_weights_test SOURCES ${PROJECT_SOURCE_DIR}/tests/model_weights_test.cc
             LIBS moe_model LABELS unit)
moe_add_test(NAME model_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/model_invariance_test.cc
             LIBS moe_model LABELS invariance)
moe_add_test(NAME diverge_test SOURCES ${PROJECT_SOURCE_DIR}/tests/diverge_test.cc
             LIBS moe_sim_diverge LABELS unit)
moe_add_test(NAME diverge_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/diverge_invariance_test.cc
             LIBS moe_sim_diverge LABELS invariance)

# The trained checkpoint models/kjv-moe (docs/training.md): its files, the tokenizer, the torch forward against the
# committed reference logits, and the held-out perplexity training.json reports. The KJV corpus is built into the
# build tree by scripts/fetch-corpus.sh (packages bible-kjv, bible-kjv-text from scripts/install-deps.sh).
add_test(NAME model_kjv_checkpoint_test
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/model_kjv_test.py ${PROJECT_SOURCE_DIR}/models/kjv-moe
                 ${CMAKE_BINARY_DIR}/kjv)
set_tests_properties(model_kjv_checkpoint_test PROPERTIES LABELS python TIMEOUT 600)
