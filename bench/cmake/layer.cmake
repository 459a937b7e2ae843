moe_add_bench(NAME layer_bench SOURCES ${PROJECT_SOURCE_DIR}/bench/layer_bench.cc LIBS moe_layer)
moe_add_bench(NAME fp8_bench SOURCES ${PROJECT_SOURCE_DIR}/bench/fp8_bench.cc LIBS moe_io)
