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
moe_add_test(NAME diverge_sampling_test SOURCES ${PROJECT_SOURCE_DIR}/tests/diverge_sampling_test.cc
             LIBS moe_sim_diverge LABELS unit)
moe_add_test(NAME diverge_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/diverge_invariance_test.cc
             LIBS moe_sim_diverge LABELS invariance threaded)

# The trained checkpoint models/kjv-moe (docs/training.md): its files, the tokenizer, the torch forward against the
# committed reference logits, and the held-out perplexity training.json reports. The KJV corpus is built into the
# build tree by scripts/fetch-corpus.sh (packages bible-kjv, bible-kjv-text from scripts/install-deps.sh).
add_test(NAME model_kjv_checkpoint_test
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/model_kjv_test.py ${PROJECT_SOURCE_DIR}/models/kjv-moe
                 ${CMAKE_BINARY_DIR}/kjv)
set_tests_properties(model_kjv_checkpoint_test PROPERTIES LABELS python TIMEOUT 600)

# The C++ side of the trained checkpoint: loading a Hugging Face directory without shape arguments (config.json
# checked against the tensors), the forward against the torch reference logits, the tokenizer against the Python
# reference, the held-out perplexity against training.json. The corpus is built into the build tree by the
# fixture kjv_corpus (scripts/fetch-corpus.sh; packages bible-kjv, bible-kjv-text from scripts/install-deps.sh).
add_test(NAME kjv_corpus_fetch
         COMMAND bash -c "test -s '${CMAKE_BINARY_DIR}/kjv/heldout.txt' || '${PROJECT_SOURCE_DIR}/scripts/fetch-corpus.sh' '${CMAKE_BINARY_DIR}/kjv'")
set_tests_properties(kjv_corpus_fetch PROPERTIES FIXTURES_SETUP kjv_corpus LABELS unit TIMEOUT 120)
set_tests_properties(model_kjv_checkpoint_test PROPERTIES FIXTURES_REQUIRED kjv_corpus)
foreach(t model_pretrained_test model_tokenizer_test model_kjv_perplexity_test)
  moe_add_test(NAME ${t} SOURCES ${PROJECT_SOURCE_DIR}/tests/${t}.cc LIBS moe_model moe_sim
               nlohmann_json::nlohmann_json Threads::Threads LABELS unit)
  target_compile_definitions(${t} PRIVATE MOE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                             MOE_KJV_CORPUS="${CMAKE_BINARY_DIR}/kjv")
endforeach()
set_tests_properties(model_tokenizer_test model_kjv_perplexity_test PROPERTIES FIXTURES_REQUIRED kjv_corpus)
# Two threads (one Model each) score the held-out windows. `heavy`: not under the sanitizers (make asan), where it
# takes minutes; model_pretrained_test and diverge_kjv_test run the same forward code there.
set_tests_properties(model_kjv_perplexity_test PROPERTIES PROCESSORS 2 LABELS "unit;heavy")

# The divergence lab on the trained model, and its router-logit recording read back by `moe-sim replay`.
moe_add_test(NAME diverge_kjv_test SOURCES ${PROJECT_SOURCE_DIR}/tests/diverge_kjv_test.cc
             LIBS moe_sim_diverge nlohmann_json::nlohmann_json LABELS unit)
target_compile_definitions(diverge_kjv_test PRIVATE MOE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                           MOE_KJV_CORPUS="${CMAKE_BINARY_DIR}/kjv")
set_tests_properties(diverge_kjv_test PROPERTIES FIXTURES_REQUIRED kjv_corpus)
if(TARGET moe-sim)
  add_test(NAME diverge_record_replay_test
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/diverge_record_replay_test.sh $<TARGET_FILE:moe-sim>
                   ${CMAKE_BINARY_DIR}/kjv ${CMAKE_BINARY_DIR}/test_data/record_logits)
  set_tests_properties(diverge_record_replay_test PROPERTIES LABELS unit TIMEOUT 120 FIXTURES_REQUIRED kjv_corpus)
endif()
