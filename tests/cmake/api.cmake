# moe/api tests: the C API from C, public header self-containment, the installed package from a consumer project,
# and the Python module (label python).
if(NOT TARGET moe_api_c)
  return()
endif()

# A C program (compiled as C99) using only moe/api/moe_c.h.
add_executable(api_c_test ${PROJECT_SOURCE_DIR}/tests/api_c_test.c)
set_target_properties(api_c_test PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(api_c_test PRIVATE -Wall -Wextra $<$<BOOL:${MOE_WERROR}>:-Werror>)
target_link_libraries(api_c_test PRIVATE moe_api_c m)
# The trained checkpoint for moe_weights_load_pretrained / moe_layer_create_pretrained, and a copy whose
# config.json disagrees with its tensors (intermediate_size 96 instead of 88; the weights are a link).
set(moe_bad_ckpt ${CMAKE_BINARY_DIR}/test_data/kjv-moe-bad-ff)
file(READ ${PROJECT_SOURCE_DIR}/models/kjv-moe/config.json moe_kjv_config)
string(REPLACE "\"intermediate_size\": 88" "\"intermediate_size\": 96" moe_kjv_bad_config "${moe_kjv_config}")
file(WRITE ${moe_bad_ckpt}/config.json "${moe_kjv_bad_config}")
file(CREATE_LINK ${PROJECT_SOURCE_DIR}/models/kjv-moe/model.safetensors ${moe_bad_ckpt}/model.safetensors SYMBOLIC)
target_compile_definitions(api_c_test PRIVATE MOE_KJV_DIR="${PROJECT_SOURCE_DIR}/models/kjv-moe"
                           MOE_KJV_BAD_DIR="${moe_bad_ckpt}")
# Every family's checkpoint directory (tests/support/family_checkpoints.h) with its float64 references, written
# once by a fixture for the C and Python tests.
add_executable(write_family_checkpoints ${PROJECT_SOURCE_DIR}/tests/tools/write_family_checkpoints.cc)
target_include_directories(write_family_checkpoints PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(write_family_checkpoints PRIVATE moe_io nlohmann_json::nlohmann_json moe_flags)
set(moe_family_dir ${CMAKE_BINARY_DIR}/test_data/families)
add_test(NAME family_checkpoints_setup COMMAND write_family_checkpoints ${moe_family_dir})
set_tests_properties(family_checkpoints_setup PROPERTIES LABELS unit TIMEOUT 120 FIXTURES_SETUP families)
# Expert parallelism from C under mpirun (the library starts MPI): each rank reads only its experts.
if(TARGET moe_parallel_mpi)
  add_executable(api_c_ep_test ${PROJECT_SOURCE_DIR}/tests/api_c_ep_test.c)
  set_target_properties(api_c_ep_test PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  target_compile_options(api_c_ep_test PRIVATE -Wall -Wextra $<$<BOOL:${MOE_WERROR}>:-Werror>)
  target_link_libraries(api_c_ep_test PRIVATE moe_api_c m)
  target_compile_definitions(api_c_ep_test PRIVATE MOE_KJV_DIR="${PROJECT_SOURCE_DIR}/models/kjv-moe")
  moe_add_mpi_test(NAME api_c_ep_test RANKS 1 2 4 COMMAND @MPIRUN_NP@ $<TARGET_FILE:api_c_ep_test>)
endif()
add_test(NAME api_c_test COMMAND api_c_test ${moe_family_dir})
set_tests_properties(api_c_test PROPERTIES FIXTURES_REQUIRED families)
# TMPDIR points nowhere: moe_weights_from_buffers must build weights memory to memory (no staging file).
set_tests_properties(api_c_test PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "TMPDIR=/nonexistent/moe-no-tmp")

# Every public header compiles alone (one translation unit per header), as C++20, and moe_c.h also as C. The
# target is built by the test itself (EXCLUDE_FROM_ALL), so a header that is not self-contained fails this test
# instead of breaking everyone's build.
get_property(moe_api_public_headers GLOBAL PROPERTY MOE_PUBLIC_HEADERS)
set(moe_api_header_sources)
foreach(header ${moe_api_public_headers})
  string(MAKE_C_IDENTIFIER ${header} id)
  set(src ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.cc)
  file(CONFIGURE OUTPUT ${src} CONTENT "#include \"${header}\"  // must compile alone\n")
  list(APPEND moe_api_header_sources ${src})
endforeach()
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/header_check/moe_c_as_c.c
     CONTENT "#include \"moe/api/moe_c.h\"\nint moe_c_header_compiles_as_c(void) { return MOE_OK; }\n")
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/header_check/main.cc
     CONTENT "extern \"C\" int moe_c_header_compiles_as_c(void);\nint main() { return moe_c_header_compiles_as_c(); }\n")
add_executable(api_headers_test ${moe_api_header_sources} ${CMAKE_CURRENT_BINARY_DIR}/header_check/moe_c_as_c.c
               ${CMAKE_CURRENT_BINARY_DIR}/header_check/main.cc)
target_include_directories(api_headers_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(api_headers_test PRIVATE moe_flags)
set_target_properties(api_headers_test PROPERTIES C_STANDARD 99)
set_target_properties(api_headers_test PROPERTIES EXCLUDE_FROM_ALL ON)
add_test(NAME api_headers_test COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target api_headers_test -j 2)
# Label build: it only compiles (so the sanitizer runs, which run code, leave it out); two compile jobs.
set_tests_properties(api_headers_test PROPERTIES LABELS "unit;build" TIMEOUT 300 PROCESSORS 2)

# The installed package: cmake --install into build/consumer/prefix, then configure, build and run
# tests/consumer against it (find_package(moe) and pkg-config; the static libraries, and libmoe.so when built).
add_test(NAME api_consumer_test
         COMMAND ${CMAKE_COMMAND} -DMOE_BUILD_DIR=${CMAKE_BINARY_DIR} -DMOE_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DMOE_SHARED=$<TARGET_EXISTS:moe_shared>
                 -DMOE_WORK_DIR=${CMAKE_BINARY_DIR}/consumer -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
                 -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER} -P ${PROJECT_SOURCE_DIR}/tests/consumer/run_consumer.cmake)
set_tests_properties(api_consumer_test PROPERTIES LABELS unit TIMEOUT 600 RUN_SERIAL ON)

# Python: unittest suites under tests/python, run with the build's package on PYTHONPATH.
if(TARGET moe_python)
  add_test(NAME api_python_test
           COMMAND ${moe_test_python} ${PROJECT_SOURCE_DIR}/tests/python/run_tests.py ${PROJECT_SOURCE_DIR}/tests/python)
  set_tests_properties(api_python_test PROPERTIES LABELS python TIMEOUT 600 FIXTURES_REQUIRED families
                       ENVIRONMENT "PYTHONPATH=${MOE_PYTHON_DIR};OMP_NUM_THREADS=1;MOE_FAMILY_DIR=${moe_family_dir}")
  # moe.Layer as one rank of an expert-parallel layer, under mpirun (the module starts MPI).
  if(TARGET moe_parallel_mpi)
    moe_add_mpi_test(NAME api_python_ep_test RANKS 2 4 LABELS python mpi
                     COMMAND @MPIRUN_NP@ ${moe_test_python} ${PROJECT_SOURCE_DIR}/tests/python/expert_parallel_mpi.py)
    foreach(np 2 4)
      set_tests_properties(api_python_ep_test_np${np} PROPERTIES ENVIRONMENT "PYTHONPATH=${MOE_PYTHON_DIR};OMP_NUM_THREADS=1")
    endforeach()
  endif()
endif()
