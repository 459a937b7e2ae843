# kernels/cpu benchmarks: linear and expert FFN, fast vs invariant kinds.
# With oneDNN, the bf16-compute cases also time its matmul.
if(TARGET moe_kernels_cpu_onednn)
  moe_add_bench(NAME kernels_cpu_linear_bench SOURCES ${PROJECT_SOURCE_DIR}/bench/kernels_cpu_linear_bench.cc
                LIBS moe_kernels_cpu_onednn)
else()
  moe_add_bench(NAME kernels_cpu_linear_bench SOURCES ${PROJECT_SOURCE_DIR}/bench/kernels_cpu_linear_bench.cc
                LIBS moe_kernels_cpu)
endif()
# What this CPU's vdpbf16ps computes: scores the contract of kernels/cpu/dpbf16.h against alternatives (a plain
# program, not run by scripts/bench.sh).
add_executable(dpbf16_probe ${PROJECT_SOURCE_DIR}/bench/dpbf16_probe.cc)
target_include_directories(dpbf16_probe PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(dpbf16_probe PRIVATE moe_kernels_cpu moe_flags)
# The machine's limits (fp32 FMA and bf16 dot-product peaks, streaming read bandwidth) as JSON: a plain program,
# run first by scripts/bench.sh (BUILD/bench/peak.json), whose numbers the kernel and layer tables divide by.
add_executable(peak_bench ${PROJECT_SOURCE_DIR}/bench/peak_bench.cc)
target_include_directories(peak_bench PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(peak_bench PRIVATE moe_kernels_cpu Threads::Threads moe_flags)
# Whether AMX's tdpbf16ps computes the same bits as that contract (a plain program, not run by scripts/bench.sh;
# prints a line and exits 0 where there is no AMX).
add_executable(amx_probe ${PROJECT_SOURCE_DIR}/bench/amx_probe.cc)
target_include_directories(amx_probe PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(amx_probe PRIVATE moe_kernels_cpu moe_flags)
