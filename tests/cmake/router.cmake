# router/: hand-computed rules (unit) and property tests over random batches (invariance).
moe_add_test(NAME router_config_test SOURCES ${PROJECT_SOURCE_DIR}/tests/router_config_test.cc
             LIBS moe_router LABELS unit)
moe_add_test(NAME router_topk_test SOURCES ${PROJECT_SOURCE_DIR}/tests/router_topk_test.cc
             LIBS moe_router LABELS unit)
moe_add_test(NAME router_topk_rule_test SOURCES ${PROJECT_SOURCE_DIR}/tests/router_topk_rule_test.cc
             LIBS moe_router LABELS unit)
moe_add_test(NAME router_exp_test SOURCES ${PROJECT_SOURCE_DIR}/tests/router_exp_test.cc
             LIBS moe_router LABELS unit)
moe_add_test(NAME router_planner_test SOURCES ${PROJECT_SOURCE_DIR}/tests/router_planner_test.cc
             ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc
             LIBS moe_router LABELS unit)
moe_add_test(NAME router_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/router_invariance_test.cc
             LIBS moe_router moe_serving LABELS invariance)
moe_add_test(NAME router_topk_block_test SOURCES ${PROJECT_SOURCE_DIR}/tests/router_topk_block_test.cc
             LIBS moe_router LABELS unit)
moe_add_test(NAME router_routing_state_test SOURCES ${PROJECT_SOURCE_DIR}/tests/router_routing_state_test.cc
             LIBS moe_router LABELS unit)
