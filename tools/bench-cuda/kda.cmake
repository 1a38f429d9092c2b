# flashtier-bench-kda: the KDA decode step (B rows) and chunked prefill at the real widths
# (64 heads × 128) against their bounds (state bytes at the HBM bandwidth measured in the same run
# where ft_bench_probe exists; fp32 FMA work at a given peak).
add_executable(flashtier-bench-kda ${CMAKE_CURRENT_LIST_DIR}/bench_kda.cpp)
target_link_libraries(flashtier-bench-kda PRIVATE ft_cuda_ops_kda
                      $<$<TARGET_EXISTS:ft_bench_probe>:ft_bench_probe>)
target_compile_definitions(flashtier-bench-kda PRIVATE $<$<TARGET_EXISTS:ft_bench_probe>:FT_HAVE_HBM_PROBE=1>)
