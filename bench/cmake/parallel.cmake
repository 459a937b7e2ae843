# Expert parallelism: a plain MPI program with its own timing (run by bench/parallel_ep_peer.sh under mpirun).
if(TARGET moe_parallel_ep AND TARGET moe_parallel_mpi)
  add_executable(parallel_ep_bench ${PROJECT_SOURCE_DIR}/bench/parallel_ep_bench.cc)
  target_include_directories(parallel_ep_bench PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(parallel_ep_bench PRIVATE moe_parallel_ep moe_parallel_mpi moe_flags)
endif()
