# kernels/cpu benchmarks: linear and expert FFN, fast vs invariant kinds.
moe_add_bench(NAME kernels_cpu_linear_bench SOURCES ${PROJECT_SOURCE_DIR}/bench/kernels_cpu_linear_bench.cc
              LIBS moe_kernels_cpu)
