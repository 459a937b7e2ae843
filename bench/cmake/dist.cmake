# Expert parallelism: a plain MPI program with its own timing (run by bench/dist_ep_peer.sh under mpirun).
if(TARGET moe_dist_ep AND TARGET moe_dist_mpi)
  add_executable(dist_ep_bench ${PROJECT_SOURCE_DIR}/bench/dist_ep_bench.cc)
  target_include_directories(dist_ep_bench PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(dist_ep_bench PRIVATE moe_dist_ep moe_dist_mpi moe_flags)
endif()
