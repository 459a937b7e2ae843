# Simulator tests (sim/): workloads, score models, parsers, experiments, routing statistics, the SVG writer, and
# the moe-sim CLI (with MOE_BUILD_SIM).
if(NOT TARGET moe_sim)
  return()
endif()
foreach(name sim_workload_test sim_serving_engine_test sim_block_key_test sim_score_model_test sim_parsers_test sim_experiment_test sim_svg_test
    sim_routing_stats_test sim_fit_test sim_parallel_test sim_distribute_test sim_deploy_test)
  moe_add_test(NAME ${name}
    SOURCES ${PROJECT_SOURCE_DIR}/tests/${name}.cc
    LIBS moe_sim
    LABELS unit
    TIMEOUT 120)
endforeach()
# The streamed simulation's routing workers and planning thread (make tsan).
foreach(name sim_experiment_test sim_parallel_test sim_deploy_test)
  moe_label_threaded(TARGET ${name} TESTS ${name})
endforeach()

# The CLI end to end: every subcommand, JSON keys, exit codes and messages, determinism of the output.
if(TARGET moe-sim)
  add_test(NAME sim_cli_test
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/sim_cli_test.sh $<TARGET_FILE:moe-sim>)
  set_tests_properties(sim_cli_test PROPERTIES LABELS unit TIMEOUT 120)
  # The deployment model against DeepEP's published low-latency dispatch and combine times: within 2x.
  add_test(NAME sim_deepep_check_test
    COMMAND bash ${PROJECT_SOURCE_DIR}/bench/deepep_check.sh $<TARGET_FILE:moe-sim>)
  set_tests_properties(sim_deepep_check_test PROPERTIES LABELS unit TIMEOUT 60)
endif()

# moe-sim under mpirun at 1, 2 and 4 ranks: sweep and run --seeds write the same bytes as one process.
if(TARGET moe-sim-mpi)
  moe_add_mpi_test(NAME sim_mpi_test RANKS 1 2 4 LABELS mpi TIMEOUT 180
                   COMMAND bash ${PROJECT_SOURCE_DIR}/tests/sim_mpi_test.sh $<TARGET_FILE:moe-sim> @NP@ @MPIRUN@)
endif()
