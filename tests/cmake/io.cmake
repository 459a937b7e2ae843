# moe/io tests: safetensors reading/writing, checkpoints, layer weights, and a Python-written file.
moe_add_test(NAME io_safetensors_test SOURCES ${PROJECT_SOURCE_DIR}/tests/io_safetensors_test.cc LIBS moe_io LABELS unit)
moe_add_test(NAME io_checkpoint_test SOURCES ${PROJECT_SOURCE_DIR}/tests/io_checkpoint_test.cc LIBS moe_io LABELS unit)
moe_add_test(NAME io_layer_weights_test SOURCES ${PROJECT_SOURCE_DIR}/tests/io_layer_weights_test.cc LIBS moe_io
             LABELS unit)
moe_add_test(NAME io_gguf_test SOURCES ${PROJECT_SOURCE_DIR}/tests/io_gguf_test.cc
             ${PROJECT_SOURCE_DIR}/tests/support/allocation_counter.cc LIBS moe_io LABELS unit)
moe_add_test(NAME io_gguf_quant_test SOURCES ${PROJECT_SOURCE_DIR}/tests/io_gguf_quant_test.cc LIBS moe_io
             LABELS unit)
moe_add_test(NAME io_quantized_storage_test SOURCES ${PROJECT_SOURCE_DIR}/tests/io_quantized_storage_test.cc
             LIBS moe_io LABELS unit)
moe_add_test(NAME io_dtype_convert_test SOURCES ${PROJECT_SOURCE_DIR}/tests/io_dtype_convert_test.cc LIBS moe_io
             LABELS unit)

# Python writes a tiny Mixtral layer by hand (numpy, and torch for bf16 when importable) plus reference dumps;
# io_pycheck loads it through moe_io and compares bits.
add_executable(io_pycheck ${PROJECT_SOURCE_DIR}/tests/io_pycheck_test.cc)
target_link_libraries(io_pycheck PRIVATE moe_io moe_flags)
add_test(NAME io_python_safetensors_test
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/io_python_safetensors_test.py $<TARGET_FILE:io_pycheck>)
set_tests_properties(io_python_safetensors_test PROPERTIES LABELS python TIMEOUT 300)
