# ft_cuda_ops_kda: the Kimi Delta Attention kernels (kda.h): short convolution, gates and q/k
# preparation, the decode step, the chunked prefill (intra-chunk and scan kernels), gated norm.
add_library(ft_cuda_ops_kda ${FLASHTIER_CUDA_LIBRARY_KIND}
  ${CMAKE_CURRENT_LIST_DIR}/kda.cu
  ${CMAKE_CURRENT_LIST_DIR}/kda_chunk.cu
  ${CMAKE_CURRENT_LIST_DIR}/kda_chunk_intra.cu
  ${CMAKE_CURRENT_LIST_DIR}/kda_chunk_scan.cu
  ${CMAKE_CURRENT_LIST_DIR}/kda_gated_norm.cu)
target_link_libraries(ft_cuda_ops_kda PUBLIC ft_cuda_core)
if(FLASHTIER_PTXAS_VERBOSE)
  target_compile_options(ft_cuda_ops_kda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
endif()
