# The installable package: `cmake --install build --prefix P` puts
#   P/bin/moe-sim, moe-diverge, P/libexec/moe/moe-sim-mpi            (the CLI; its MPI build for mpirun)
#   P/share/moe/{models/kjv-moe,scenarios,scripts/fetch-corpus.sh}   (what moe-sim finds beside itself)
#   P/include/moe/{base,router,router/rules,kernels,kernels/cpu,moe/io,moe/layer,moe/api}/*.h
#                                                                    (include root: P/include/moe)
#   P/lib/libmoe.so -> libmoe.so.0.1 -> libmoe.so.0.1.0              (the C API, shared: dlopen, ctypes, FFI;
#                                                                    SONAME libmoe.so.0.1; not in sanitizer builds)
#   P/lib/libmoe_{router,kernels_formats,kernels_cpu,io,layer,api_c}.a
#   P/lib/cmake/moe/moe{Config,ConfigVersion,Targets}.cmake          (find_package(moe))
#   P/lib/pkgconfig/moe.pc, moe-c.pc                                 (pkg-config: static; the shared C API)
#   P/lib/python3/dist-packages/moe/                                 (import moe)
# P/lib is CMAKE_INSTALL_LIBDIR (lib/x86_64-linux-gnu on Debian when configured with the prefix /usr); the
# Python module is under lib/python3 whatever it is. Imported targets: moe::moe (the C++ library: layer, weights
# I/O, kernels, router; C++20), moe::moe_c (the C API, static), moe::moe_c_shared (the C API, libmoe.so), and the
# parts moe::moe_router, moe::moe_kernels_cpu, moe::moe_io, moe::moe_layer. docs/embedding.md, docs/install.md.
if(NOT TARGET moe_api_c)
  return()
endif()
include(CMakePackageConfigHelpers)
if(MOE_XXHASH_LIBRARY)
  get_filename_component(MOE_XXHASH_LIBRARY_DIR ${MOE_XXHASH_LIBRARY} DIRECTORY)
endif()

set(MOE_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/moe)
set(MOE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/moe)

# moe_flags is exported only because static libraries carry their PRIVATE links as $<LINK_ONLY:...>: consumers
# get its link options (sanitizers), never its compile options.
set(moe_install_targets moe_router moe_kernels_formats moe_kernels_cpu moe_io moe_layer moe_api_c moe_all moe_flags)
foreach(t moe_shared moe_cuda_base moe_router_cuda moe_kernels_cuda)
  if(TARGET ${t})
    list(APPEND moe_install_targets ${t})
  endif()
endforeach()
# Every project target that an installed target links (also privately: static libraries carry those links) must be
# exported too; walk the link graph so that a new dependency cannot break the export.
set(moe_queue ${moe_install_targets})
set(moe_install_targets)
while(moe_queue)
  list(POP_FRONT moe_queue t)
  get_target_property(aliased ${t} ALIASED_TARGET)
  if(aliased)
    set(t ${aliased})
  endif()
  if(t IN_LIST moe_install_targets)
    continue()
  endif()
  list(APPEND moe_install_targets ${t})
  foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
    get_target_property(libs ${t} ${prop})
    if(NOT libs)
      continue()
    endif()
    foreach(l ${libs})
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" l "${l}")
      if(NOT l MATCHES "^\\$<" AND TARGET ${l})
        get_target_property(imported ${l} IMPORTED)
        if(NOT imported)
          list(APPEND moe_queue ${l})
        endif()
      endif()
    endforeach()
  endforeach()
endwhile()
# The bf16 fast path on oneDNN (moe_kernels_cpu_onednn, linked by moe_layer when built) needs oneDNN and OpenMP.
set(MOE_PACKAGE_HAS_ONEDNN OFF)
if("moe_kernels_cpu_onednn" IN_LIST moe_install_targets)
  set(MOE_PACKAGE_HAS_ONEDNN ON)
endif()
set(MOE_PACKAGE_HAS_CUDA OFF)
if("moe_kernels_cuda" IN_LIST moe_install_targets)
  set(MOE_PACKAGE_HAS_CUDA ON)
endif()
message(STATUS "moe: installable targets: ${moe_install_targets}")

# NOTES: some targets name the source tree as a plain PUBLIC include directory and link xxhash by its absolute
# path; both are fine in the build tree but must not leak into the installed package. Wrap source/build paths in
# $<BUILD_INTERFACE:...> and map the xxhash library to moe::xxhash (defined by moeConfig.cmake). These fix-ups
# are no-ops for targets that already do this themselves.
foreach(t ${moe_install_targets})
  get_target_property(dirs ${t} INTERFACE_INCLUDE_DIRECTORIES)
  if(dirs)
    set(fixed)
    foreach(d ${dirs})
      if(NOT d MATCHES "^\\$<" AND (d MATCHES "^${PROJECT_SOURCE_DIR}" OR d MATCHES "^${PROJECT_BINARY_DIR}"))
        list(APPEND fixed "$<BUILD_INTERFACE:${d}>")
      elseif(d MATCHES "^\\$<INSTALL_INTERFACE:")
        # The installed include root is include/moe for every target (INCLUDES DESTINATION below).
      else()
        list(APPEND fixed "${d}")
      endif()
    endforeach()
    set_target_properties(${t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${fixed}")
  endif()
  get_target_property(libs ${t} INTERFACE_LINK_LIBRARIES)
  if(libs AND MOE_XXHASH_LIBRARY)
    set(fixed)
    foreach(l ${libs})
      if(l STREQUAL MOE_XXHASH_LIBRARY)
        list(APPEND fixed "$<BUILD_INTERFACE:${l}>" "$<INSTALL_INTERFACE:moe::xxhash>")
      else()
        list(APPEND fixed "${l}")
      endif()
    endforeach()
    set_target_properties(${t} PROPERTIES INTERFACE_LINK_LIBRARIES "${fixed}")
  endif()
endforeach()

install(TARGETS ${moe_install_targets} EXPORT moeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${MOE_INSTALL_INCLUDEDIR})
install(EXPORT moeTargets NAMESPACE moe:: DESTINATION ${MOE_INSTALL_CMAKEDIR} FILE moeTargets.cmake)

get_property(moe_public_headers GLOBAL PROPERTY MOE_PUBLIC_HEADERS)
if(MOE_PACKAGE_HAS_CUDA)
  # The CUDA backend's headers (they need the CUDA toolkit's include directories, which CUDA::cudart brings).
  # Headers whose first line says they are internal, and plan_omp.h (its test library is not installed), stay out.
  file(GLOB moe_cuda_headers RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/base/cuda/*.h
       ${PROJECT_SOURCE_DIR}/router/cuda/*.h ${PROJECT_SOURCE_DIR}/kernels/cuda/*.h)
  foreach(h ${moe_cuda_headers})
    file(STRINGS ${PROJECT_SOURCE_DIR}/${h} first_line LIMIT_COUNT 1)
    if(NOT first_line MATCHES "[Ii]nternal" AND NOT h MATCHES "plan_omp\\.h$")
      list(APPEND moe_public_headers ${h})
    endif()
  endforeach()
endif()
foreach(header ${moe_public_headers})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${MOE_INSTALL_INCLUDEDIR}/${dir})
endforeach()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/moeConfig.cmake.in ${PROJECT_BINARY_DIR}/moeConfig.cmake
                              INSTALL_DESTINATION ${MOE_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/moeConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/moeConfig.cmake ${PROJECT_BINARY_DIR}/moeConfigVersion.cmake
        DESTINATION ${MOE_INSTALL_CMAKEDIR})

# pkg-config: relocatable (prefix found from the .pc file's own place), static libraries in dependency order.
file(RELATIVE_PATH MOE_PC_PREFIX_FROM_PCDIR /moe-prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /moe-prefix)
set(MOE_PC_PREFIX_FROM_PCDIR "\${pcfiledir}/${MOE_PC_PREFIX_FROM_PCDIR}")
string(REGEX REPLACE "/$" "" MOE_PC_PREFIX_FROM_PCDIR "${MOE_PC_PREFIX_FROM_PCDIR}")
set(MOE_PC_XXHASH -lxxhash)
if(MOE_XXHASH_LIBRARY)
  get_filename_component(xxhash_dir ${MOE_XXHASH_LIBRARY} DIRECTORY)
  if(NOT xxhash_dir MATCHES "^/usr/lib" AND NOT xxhash_dir STREQUAL "/lib")
    set(MOE_PC_XXHASH "-L${xxhash_dir} -lxxhash")
  endif()
endif()
# A sanitizer build's libraries need the sanitizer runtime at link time (CMake consumers get it from moe::moe_flags).
set(MOE_PC_EXTRA_LIBS "")
if(MOE_SANITIZE)
  set(MOE_PC_EXTRA_LIBS " -fsanitize=${MOE_SANITIZE}")
endif()
# With CUDA, the C API's device "cuda" brings the GPU layer, the CUDA kernels and the CUDA runtime libraries.
set(MOE_PC_GPU_LIBS "")
set(MOE_PC_CUDA_KERNEL_LIBS "")
set(MOE_PC_CUDA_SYSTEM_LIBS "")
if("moe_cuda_layer" IN_LIST moe_install_targets)
  set(MOE_PC_GPU_LIBS " -lmoe_cuda_layer")
  set(MOE_PC_CUDA_KERNEL_LIBS " -lmoe_router_cuda -lmoe_kernels_cuda -lmoe_cuda_base")
  set(MOE_PC_CUDA_SYSTEM_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart")
endif()
set(MOE_PC_ONEDNN_LIBS "")
set(MOE_PC_ONEDNN_SYSTEM_LIBS "")
if(MOE_PACKAGE_HAS_ONEDNN)
  set(MOE_PC_ONEDNN_LIBS " -lmoe_kernels_cpu_onednn")
  # -ldnnl, not the library's path: pkg-config consumers (CMake's PkgConfig:: targets) put paths among the link
  # options, ahead of the static libraries that need them.
  get_filename_component(dnnl_dir ${MOE_DNNL_LIBRARY} DIRECTORY)
  set(MOE_PC_ONEDNN_SYSTEM_LIBS " -ldnnl -fopenmp")
  if(NOT dnnl_dir MATCHES "^/usr/lib" AND NOT dnnl_dir STREQUAL "/lib")
    set(MOE_PC_ONEDNN_SYSTEM_LIBS " -L${dnnl_dir} -ldnnl -fopenmp")
  endif()
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/moe.pc.in ${PROJECT_BINARY_DIR}/moe.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/moe.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python package (when built): P/lib/python3/dist-packages/moe, usable with PYTHONPATH=P/lib/python3/dist-packages
# (Debian's own place for it under /usr, whatever CMAKE_INSTALL_LIBDIR is).
if(TARGET moe_python)
  install(TARGETS moe_python LIBRARY DESTINATION lib/python3/dist-packages/moe)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/moe/ DESTINATION lib/python3/dist-packages/moe
          FILES_MATCHING PATTERN "*.py")
  set_target_properties(moe_python PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endif()

# pkg-config of the shared C API (-lmoe), when this build has it (not in sanitizer builds).
if(TARGET moe_shared)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/moe-c.pc.in ${PROJECT_BINARY_DIR}/moe-c.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/moe-c.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

# What users run: moe-sim (and the divergence lab alone, moe-diverge), moe-sim's MPI build that it execs under
# mpirun, and the data they find beside themselves. The relative places are fixed - bin, libexec/moe, share/moe
# - whatever the GNUInstallDirs variables say (sim/install_paths.h). Installed programs keep the run paths of
# libraries outside the system's (the CUDA toolkit's), never the build tree's.
if(TARGET moe-sim)
  set(moe_programs moe-sim)
  if(TARGET moe-diverge)
    list(APPEND moe_programs moe-diverge)
  endif()
  install(TARGETS ${moe_programs} RUNTIME DESTINATION bin)
  if(TARGET moe-sim-mpi)
    install(TARGETS moe-sim-mpi RUNTIME DESTINATION libexec/moe)
    list(APPEND moe_programs moe-sim-mpi)
  endif()
  set_target_properties(${moe_programs} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/kjv-moe DESTINATION share/moe/models)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/sim/scenarios/ DESTINATION share/moe/scenarios FILES_MATCHING PATTERN "*.toml")
  install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/fetch-corpus.sh DESTINATION share/moe/scripts)
endif()
