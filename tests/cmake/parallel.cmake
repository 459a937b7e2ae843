# Communicator tests (moe/parallel). Labels: unit (single process), mpi (under mpirun), gpu (NCCL).

# moe_add_mpi_program(NAME name SOURCES ... LIBS ... [DEFINITIONS ...]): a program that the tests below start
# under mpirun (its own main: MPI_Init/Finalize), built into bin/ with the project's flags.
function(moe_add_mpi_program)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;LIBS;DEFINITIONS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_include_directories(${ARG_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} moe_flags)
  if(ARG_DEFINITIONS)
    target_compile_definitions(${ARG_NAME} PRIVATE ${ARG_DEFINITIONS})
  endif()
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

# moe_add_mpi_fault_test(NAME name PROGRAM target MODE mode MAX_SECONDS s EXPECT regex...): the fault program
# `target` run under mpirun at 2 and 4 ranks with the fault `mode` injected on the last rank (@LAST@), through
# tests/parallel_mpi_fault_test.sh, which asserts a non-zero exit within s seconds and every EXPECT regex in the
# output (moe_add_mpi_test's placeholders apply to them). Labels mpi, timeout 90 s.
set(moe_parallel_fault_check ${PROJECT_SOURCE_DIR}/tests/parallel_mpi_fault_test.sh)
function(moe_add_mpi_fault_test)
  cmake_parse_arguments(ARG "" "NAME;PROGRAM;MODE;MAX_SECONDS" "EXPECT" ${ARGN})
  set(expects)
  foreach(regex IN LISTS ARG_EXPECT)
    list(APPEND expects --expect "${regex}")
  endforeach()
  moe_add_mpi_test(NAME ${ARG_NAME} RANKS 2 4 TIMEOUT 90
    COMMAND ${moe_parallel_fault_check} --max-seconds ${ARG_MAX_SECONDS} ${expects}
            -- @MPIRUN_NP@ $<TARGET_FILE:${ARG_PROGRAM}> ${ARG_MODE})
endfunction()
# The two faults every MPI program under test handles alike, NAME_exit and NAME_stuck: the last rank exits
# without MPI_Finalize (mpirun or the peers' timeout end the job), or stays alive outside the collective
# `COLLECTIVE` (what the program calls from `WHERE`), so that only the communicator's 5 s timeout can end it.
function(moe_add_mpi_exit_and_stuck_tests)
  cmake_parse_arguments(ARG "" "NAME;PROGRAM;WHERE;COLLECTIVE" "" ${ARGN})
  moe_add_mpi_fault_test(NAME ${ARG_NAME}_exit PROGRAM ${ARG_PROGRAM} MODE exit MAX_SECONDS 30 EXPECT
    "rank @LAST@ exits without MPI_Finalize \\(injected fault\\)"
    "exited with non-zero status|exiting improperly|a peer is dead or stuck")
  moe_add_mpi_fault_test(NAME ${ARG_NAME}_stuck PROGRAM ${ARG_PROGRAM} MODE stuck MAX_SECONDS 20 EXPECT
    "rank @LAST@ is stuck outside ${ARG_WHERE} \\(injected fault\\)"
    "moe::parallel abort \\(mpi, rank [0-9]+ of @NP@\\): mpi ${ARG_COLLECTIVE}: rank [0-9]+ of @NP@ waited 5000 ms[;] a peer is dead or stuck")
endfunction()

moe_add_test(NAME parallel_single_process_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_single_process_test.cc
          ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc
  LIBS moe_parallel moe_parallel_factory
  LABELS unit
  TIMEOUT 60)

if(TARGET moe_parallel_mpi)
  # Functional tests: one gtest binary with its own main (MPI_Init/Finalize), at 1, 2 and 4 ranks.
  moe_add_mpi_program(NAME parallel_mpi_test SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_mpi_test.cc
                      ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc LIBS moe_parallel_mpi GTest::gtest)
  moe_add_mpi_test(NAME parallel_mpi_test RANKS 1 2 4 COMMAND @MPIRUN_NP@ $<TARGET_FILE:parallel_mpi_test>)

  # Fault tests (moe_add_mpi_fault_test): the last rank (@LAST@) is the one that fails.
  moe_add_mpi_program(NAME parallel_mpi_fault SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_mpi_fault.cc
                      LIBS moe_parallel_mpi)
  moe_add_mpi_fault_test(NAME parallel_mpi_fault_abort PROGRAM parallel_mpi_fault MODE abort MAX_SECONDS 20 EXPECT
    "moe::parallel abort \\(mpi, rank @LAST@ of @NP@\\): rank @LAST@ failed to load its experts \\(injected fault\\)")
  moe_add_mpi_exit_and_stuck_tests(NAME parallel_mpi_fault PROGRAM parallel_mpi_fault WHERE "the collective"
                                   COLLECTIVE all_to_all_v)
endif()

if(TARGET moe_parallel_nccl)
  moe_add_test(NAME parallel_nccl_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_nccl_test.cc
    LIBS moe_parallel_nccl moe_cuda_base
    LABELS gpu
    TIMEOUT 120)
  # Without a device, ctest shows the test as skipped (the gtest output says why).
  set_tests_properties(parallel_nccl_test PROPERTIES SKIP_REGULAR_EXPRESSION "no usable CUDA device")
endif()

# Expert parallelism (moe_parallel_ep): one process (unit), then under mpirun at 1, 2 and 4 ranks (mpi).
if(TARGET moe_parallel_ep)
  moe_add_test(NAME parallel_ep_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_ep_test.cc
    LIBS moe_parallel_ep
    LABELS unit
    TIMEOUT 60)
endif()

if(TARGET moe_parallel_ep AND TARGET moe_parallel_mpi)
  moe_add_mpi_program(NAME parallel_ep_mpi_test
                      SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_ep_mpi_test.cc
                              ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc
                      LIBS moe_parallel_ep moe_parallel_mpi moe_serving GTest::gtest)
  moe_add_mpi_test(NAME parallel_ep_mpi_test RANKS 1 2 4 TIMEOUT 180
                   COMMAND @MPIRUN_NP@ $<TARGET_FILE:parallel_ep_mpi_test>)

  # The backend harness (tests/layer_cases_test.cc) with the expert-parallel backend: the shared table of cases
  # at 1, 2 and 4 ranks, accuracy apart from bit equality (the latter against the single-process CPU layer too).
  moe_add_mpi_program(NAME layer_cases_mpi_test SOURCES ${PROJECT_SOURCE_DIR}/tests/layer_cases_test.cc
                      LIBS moe_parallel_ep moe_parallel_mpi GTest::gtest DEFINITIONS MOE_LAYER_CASES_MPI=1)
  moe_add_mpi_test(NAME layer_cases_ep_accuracy RANKS 1 2 4 TIMEOUT 300
                   COMMAND @MPIRUN_NP@ $<TARGET_FILE:layer_cases_mpi_test> --gtest_filter=*LayerCaseAccuracy*)
  moe_add_mpi_test(NAME layer_cases_ep_invariance RANKS 1 2 4 LABELS mpi invariance TIMEOUT 600
                   COMMAND @MPIRUN_NP@ $<TARGET_FILE:layer_cases_mpi_test>
                           --gtest_filter=*LayerCaseInvariance*:*LayerCaseChunking*:*LayerCaseCounterCheck*:*LayerCaseCrossBackend*)

  moe_add_mpi_program(NAME parallel_ep_fault SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_ep_fault.cc
                      LIBS moe_parallel_ep moe_parallel_mpi)
  moe_add_mpi_fault_test(NAME parallel_ep_fault_throw PROGRAM parallel_ep_fault MODE throw MAX_SECONDS 20 EXPECT
    "moe::parallel abort \\(mpi, rank @LAST@ of @NP@\\): rank @LAST@ failed while preparing its batch \\(injected fault\\)")
  moe_add_mpi_exit_and_stuck_tests(NAME parallel_ep_fault PROGRAM parallel_ep_fault WHERE "forward\\(\\)"
                                   COLLECTIVE all_gather_v)
  # Every rank reports the mismatch at start-up (rank 0 and the odd rank are checked by name).
  moe_add_mpi_fault_test(NAME parallel_ep_fault_mismatch PROGRAM parallel_ep_fault MODE mismatch MAX_SECONDS 20 EXPECT
    "rank 0: start-up failed: mpi check_consistent: rank 0 of @NP@: layer config \\(experts/k/policy/kernels\\) differs across ranks: 1 of @NP@ ranks differ from rank 0 \\(0x[0-9a-f]+\\): rank @LAST@ \\(0x"
    "rank @LAST@: start-up failed: mpi check_consistent: rank @LAST@ of @NP@: layer config")
endif()

# Expert parallelism over the NCCL transport (HostStagedCommunicator), world size 1; skips without a GPU.
if(TARGET moe_parallel_ep AND TARGET moe_parallel_staged AND TARGET moe_parallel_nccl)
  moe_add_test(NAME parallel_ep_nccl_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_ep_nccl_test.cc
    LIBS moe_parallel_ep moe_parallel_staged moe_parallel_nccl moe_cuda_base
    LABELS gpu
    TIMEOUT 120)
  set_tests_properties(parallel_ep_nccl_test PROPERTIES SKIP_REGULAR_EXPRESSION "no usable CUDA device")
endif()

# cmake/find_nccl.cmake finds the NCCL wheel's layout (libnccl.so.2 only), or says NCCL was not found.
add_test(NAME nccl_find_test COMMAND bash ${PROJECT_SOURCE_DIR}/tests/nccl_find_test.sh ${PROJECT_SOURCE_DIR}
                                     ${CMAKE_BINARY_DIR}/nccl-find-test ${moe_test_python})
set_tests_properties(nccl_find_test PROPERTIES LABELS unit TIMEOUT 60)

# Expert placement with redundant experts and DeepSeek's load balancer (moe_parallel_placement): pure functions.
moe_add_test(NAME parallel_placement_test
  SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_placement_test.cc
  LIBS moe_parallel_placement
  LABELS unit
  TIMEOUT 60)
target_compile_definitions(parallel_placement_test PRIVATE MOE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# Expert parallelism at scale: home-rank planning, redundant experts under it, ranks holding only their part.
if(TARGET moe_parallel_ep AND TARGET moe_parallel_mpi)
  moe_add_mpi_program(NAME parallel_ep_home_test
                      SOURCES ${PROJECT_SOURCE_DIR}/tests/parallel_ep_home_test.cc
                              ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc
                      LIBS moe_parallel_ep moe_parallel_mpi GTest::gtest)
  moe_add_mpi_test(NAME parallel_ep_home_test RANKS 1 2 4 TIMEOUT 180
                   COMMAND @MPIRUN_NP@ $<TARGET_FILE:parallel_ep_home_test>)
endif()
