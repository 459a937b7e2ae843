# moe-sim inspect (sim/inspect) on the family checkpoints the api area's fixture writes.
if(TARGET moe-sim AND TARGET write_family_checkpoints)
  add_test(NAME sim_inspect_test COMMAND bash ${PROJECT_SOURCE_DIR}/tests/sim_inspect_test.sh $<TARGET_FILE:moe-sim>
                                         ${CMAKE_BINARY_DIR}/test_data/families)
  set_tests_properties(sim_inspect_test PROPERTIES LABELS unit TIMEOUT 120 FIXTURES_REQUIRED families)
endif()
