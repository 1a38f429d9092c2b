# flashtier-bench-mla: sparse-attention kernels (indexer selection, MLA attention) at the real
# model's widths, decode and prefill shapes, against bandwidth / throughput bounds.
add_executable(flashtier-bench-mla ${CMAKE_CURRENT_LIST_DIR}/bench_mla.cpp)
target_link_libraries(flashtier-bench-mla PRIVATE ft_cuda_ops_mla)
