# Fuzz regressions: every fuzz target (fuzz/fuzz_<name>.cc) built in the normal build with a plain main
# (fuzz/replay_main.cc) and run over its committed seeds (fuzz/corpus/<name>/) and the inputs of the crashes
# it found (tests/fuzz_regressions/<name>/, docs/fuzzing.md). Under `make asan` they run with ASan + UBSan.
set(moe_fuzz_targets
  "npy:moe_sim" "meta_csv:moe_sim" "trace:moe_sim" "scenario:moe_sim"
  "safetensors:moe_io" "checkpoint_index:moe_io" "gguf:moe_io" "hf_config:moe_io" "model_config:moe_model" "model_file:moe_model"
  "tokenizer:moe_model" "c_api:moe_api_c")
foreach(entry ${moe_fuzz_targets})
  string(REPLACE ":" ";" parts ${entry})
  list(GET parts 0 name)
  list(GET parts 1 lib)
  if(NOT TARGET ${lib})
    continue()
  endif()
  set(sources ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${name}.cc ${PROJECT_SOURCE_DIR}/fuzz/replay_main.cc)
  if(name STREQUAL "c_api")
    list(APPEND sources ${PROJECT_SOURCE_DIR}/fuzz/c_caller.c)
  endif()
  add_executable(fuzz_replay_${name} ${sources})
  target_link_libraries(fuzz_replay_${name} PRIVATE ${lib} moe_flags)
  target_include_directories(fuzz_replay_${name} PRIVATE ${PROJECT_SOURCE_DIR})
  set(inputs ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name})
  if(EXISTS ${PROJECT_SOURCE_DIR}/tests/fuzz_regressions/${name})
    list(APPEND inputs ${PROJECT_SOURCE_DIR}/tests/fuzz_regressions/${name})
  endif()
  add_test(NAME fuzz_replay_${name} COMMAND fuzz_replay_${name} ${inputs})
  set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS unit TIMEOUT 120)
endforeach()
