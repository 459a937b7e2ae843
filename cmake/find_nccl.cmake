# NCCL for the NCCL communicator (moe/parallel). Sets MOE_NCCL_INCLUDE_DIR and MOE_NCCL_LIBRARY when found,
# and always prints one line saying what was found where, or that NCCL was not found.
#
# Searched, in order: MOE_NCCL_ROOT (a directory with include/nccl.h and lib/libnccl.so*), the CUDA toolkit, the
# system, and the NCCL wheel of the Python on PATH (or Python3_EXECUTABLE): site-packages/nvidia/nccl, which
# ships only lib/libnccl.so.2 (no unversioned link), so that file name is searched too.
set(MOE_NCCL_ROOT "" CACHE PATH "Directory with include/nccl.h and lib/libnccl.so* (overrides the search)")
# Internal: tests/nccl_find turns the toolkit off to test the wheel's layout on a machine whose toolkit has NCCL.
set(MOE_NCCL_SEARCH_TOOLKIT ON CACHE INTERNAL "search the CUDA toolkit for NCCL")

set(moe_nccl_hints ${MOE_NCCL_ROOT})
if(NOT MOE_NCCL_ROOT)
  if(MOE_NCCL_SEARCH_TOOLKIT)
    list(APPEND moe_nccl_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR} /usr/local/cuda)
  endif()
  set(moe_nccl_python ${Python3_EXECUTABLE})
  if(NOT moe_nccl_python)
    find_program(moe_nccl_python NAMES python3 python)
  endif()
  if(moe_nccl_python)
    # nvidia is a namespace package: nvidia.nccl.__path__[0] is the wheel's directory.
    execute_process(
      COMMAND ${moe_nccl_python} -c "import nvidia.nccl as n; print(list(n.__path__)[0])"
      OUTPUT_VARIABLE moe_nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE moe_nccl_rc)
    if(moe_nccl_rc EQUAL 0 AND IS_DIRECTORY "${moe_nccl_wheel}")
      list(APPEND moe_nccl_hints ${moe_nccl_wheel})
    endif()
  endif()
endif()

find_path(MOE_NCCL_INCLUDE_DIR nccl.h HINTS ${moe_nccl_hints} PATH_SUFFIXES include)
find_library(MOE_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${moe_nccl_hints} PATH_SUFFIXES lib lib64)
if(MOE_NCCL_INCLUDE_DIR AND MOE_NCCL_LIBRARY)
  message(STATUS "moe: NCCL found: ${MOE_NCCL_LIBRARY} (header ${MOE_NCCL_INCLUDE_DIR}/nccl.h)")
else()
  if(NOT moe_nccl_hints)
    set(moe_nccl_hints "no hints")
  endif()
  message(STATUS "moe: NCCL not found (searched ${moe_nccl_hints} and the system; header "
                 "'${MOE_NCCL_INCLUDE_DIR}', library '${MOE_NCCL_LIBRARY}'); the NCCL communicator and its "
                 "tests are not built. Set MOE_NCCL_ROOT to a directory with include/nccl.h and lib/libnccl.so*")
endif()
