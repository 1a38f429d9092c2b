# flashtier-bench-tiers: the expert tiers at the real widths and depth under a VRAM budget (a
# synthetic EXL3 segment in /dev/shm, the CUDA engine's cache + zero-copy path, routing from a
# trace) against bandwidths measured in the same run.
if(TARGET ft_cuda_engine)
  add_executable(flashtier-bench-tiers ${CMAKE_CURRENT_LIST_DIR}/bench_tiers.cpp)
  target_link_libraries(flashtier-bench-tiers PRIVATE ft_cuda_engine ft_bench_probe ft_tiers ft_exl3 ft_ipc ft_cew ft_expert_client ft_sampling)
endif()
