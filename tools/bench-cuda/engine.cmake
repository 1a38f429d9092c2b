# flashtier-bench-engine: the CUDA engine on a synthetic bf16 model at the real widths and depth
# (decode step time per batch size, prefill tokens/s, per-op times, against bounds measured in
# the same run). hbm_probe: the HBM read-bandwidth probe every GPU benchmark may use.
add_library(ft_bench_probe STATIC ${CMAKE_CURRENT_LIST_DIR}/hbm_probe.cu)
target_link_libraries(ft_bench_probe PUBLIC ft_cuda_core)
if(TARGET ft_cuda_engine)
  add_executable(flashtier-bench-engine ${CMAKE_CURRENT_LIST_DIR}/bench_engine.cpp)
  target_link_libraries(flashtier-bench-engine PRIVATE ft_cuda_engine ft_bench_probe)
endif()
