# cuBLASLt reference rate (loaded at run time; shared with the EXL3 benchmark) and
# flashtier-bench-linear (dense fp16 linears and the dense MoE layer against HBM and cuBLAS).
add_library(ft_bench_cublas_ref STATIC ${CMAKE_CURRENT_LIST_DIR}/cublas_ref.cpp)
target_link_libraries(ft_bench_cublas_ref PUBLIC CUDA::cudart_static ${CMAKE_DL_LIBS})
# The benchmark holds its own small kernels (fills, the HBM read probe): compiled as CUDA.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/bench_linear.cpp PROPERTIES LANGUAGE CUDA)
add_executable(flashtier-bench-linear ${CMAKE_CURRENT_LIST_DIR}/bench_linear.cpp)
target_link_libraries(flashtier-bench-linear PRIVATE ft_cuda_ops_linear ft_bench_cublas_ref)
