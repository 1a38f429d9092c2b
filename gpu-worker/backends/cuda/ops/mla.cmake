# Sparse-attention kernels: cache append, indexer pool keys / scores / selection (with the device
# top-k), absorbed MLA attention (SIMT and tensor-core paths).
add_library(ft_cuda_ops_mla ${FLASHTIER_CUDA_LIBRARY_KIND}
  ${CMAKE_CURRENT_LIST_DIR}/mla.cu
  ${CMAKE_CURRENT_LIST_DIR}/mla_cache.cu
  ${CMAKE_CURRENT_LIST_DIR}/mla_mma.cu
  ${CMAKE_CURRENT_LIST_DIR}/indexer.cu
  ${CMAKE_CURRENT_LIST_DIR}/topk.cu)
target_link_libraries(ft_cuda_ops_mla PUBLIC ft_cuda_core)
