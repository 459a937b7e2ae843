# The install as a user meets it (tests/install_test.sh, tests/install/checks.sh): cmake --install of this build
# into a temporary prefix, then, with the source and build trees hidden and from an empty directory, moe-sim run /
# sweep / diverge (and sweep under mpirun), the C API through libmoe.so (-lmoe via pkg-config, dlopen, ctypes) and
# `import moe`. Label install: not in the sanitizer runs (they build no libmoe.so). Skipped (77), saying why,
# where no private mount namespace can be made.
if(NOT TARGET moe-sim OR NOT TARGET moe_shared OR NOT TARGET moe_sim_diverge)
  return()
endif()
set(moe_install_test_mpirun)
if(TARGET moe-sim-mpi)
  set(moe_install_test_mpirun ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe)
endif()
add_test(NAME install_test
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/install_test.sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                 ${CMAKE_C_COMPILER} ${moe_test_python} ${moe_install_test_mpirun})
set_tests_properties(install_test PROPERTIES LABELS install TIMEOUT 300 SKIP_RETURN_CODE 77 PROCESSORS 2
                                              RESOURCE_LOCK build_install)
