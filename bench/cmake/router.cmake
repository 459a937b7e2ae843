moe_add_bench(NAME router_planner_bench SOURCES ${PROJECT_SOURCE_DIR}/bench/router_planner_bench.cc LIBS moe_router)
