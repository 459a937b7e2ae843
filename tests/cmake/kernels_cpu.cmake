# kernels/cpu tests. Accuracy tests (label unit) compare with float64 references; the determinism test
# (label invariance) compares bits and lives in its own executable.
moe_add_test(NAME kernels_cpu_bf16_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_bf16_test.cc
             LIBS moe_kernels_cpu LABELS unit)
moe_add_test(NAME kernels_cpu_thread_pool_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_thread_pool_test.cc
             LIBS moe_kernels_cpu LABELS unit threaded)
moe_add_test(NAME kernels_cpu_activations_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_activations_test.cc
             LIBS moe_kernels_cpu LABELS unit)
moe_add_test(NAME kernels_cpu_linear_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_linear_test.cc
             LIBS moe_kernels_cpu LABELS unit)
moe_add_test(NAME kernels_cpu_expert_ffn_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_expert_ffn_test.cc
             LIBS moe_kernels_cpu LABELS unit)
# `threaded`: also run under ThreadSanitizer by `make tsan` (slow there, hence the long timeout).
moe_add_test(NAME kernels_cpu_invariance_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_invariance_test.cc
             LIBS moe_kernels_cpu LABELS invariance threaded TIMEOUT 1500)
moe_add_test(NAME kernels_cpu_alloc_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_alloc_test.cc
             ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc LIBS moe_kernels_cpu LABELS unit)
# bf16 compute: the vdpbf16ps contract (emulation == hardware), accuracy of the bf16 kernels (unit), and
# their invariance by exact bits (invariance).
moe_add_test(NAME kernels_cpu_dpbf16_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_dpbf16_test.cc
             LIBS moe_kernels_cpu LABELS unit)
# The tile contract (AMX's tdpbf16ps): its rules, and emulation == hardware where the CPU has AMX-BF16.
moe_add_test(NAME kernels_cpu_tile_bf16_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_tile_bf16_test.cc
             LIBS moe_kernels_cpu LABELS unit)
moe_add_test(NAME kernels_cpu_bf16_compute_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_bf16_compute_test.cc
             LIBS moe_kernels_cpu LABELS unit)
moe_add_test(NAME kernels_cpu_bf16_invariance_test
             SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_bf16_invariance_test.cc
             LIBS moe_kernels_cpu LABELS invariance threaded TIMEOUT 1500)
if(TARGET moe_kernels_cpu_onednn)
  moe_add_test(NAME kernels_cpu_onednn_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_onednn_test.cc
               LIBS moe_kernels_cpu_onednn LABELS unit)
endif()
# Quantized weights (kernels/quant_formats.h, kernels/cpu/linear_quant.h): the formats' layouts and reference
# dequantizer (unit), the kernels' accuracy against float64 with and without the activation rule (unit), and
# their invariance by exact bits, every implementation against the scalar emulation, the mutation check
# (invariance).
moe_add_test(NAME kernels_quant_formats_test SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_quant_formats_test.cc
             LIBS moe_kernels_formats LABELS unit)
moe_add_test(NAME kernels_cpu_quant_accuracy_test
             SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_quant_accuracy_test.cc
             LIBS moe_kernels_cpu LABELS unit)
moe_add_test(NAME kernels_cpu_quant_invariance_test
             SOURCES ${PROJECT_SOURCE_DIR}/tests/kernels_cpu_quant_invariance_test.cc
             LIBS moe_kernels_cpu LABELS invariance threaded TIMEOUT 1500)
