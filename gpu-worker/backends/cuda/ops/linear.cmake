# ft_cuda_ops_linear: dense fp16 linears (skinny and tiled kernels under one reduction
# contract), fp32 SIMT linears, and the dense grouped MoE (dispatch, experts, combine).
add_library(ft_cuda_ops_linear ${FLASHTIER_CUDA_LIBRARY_KIND}
  ${CMAKE_CURRENT_LIST_DIR}/linear_host.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_launch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_to_f16.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear_f16.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear_f32.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_dispatch.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_dense.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_dense_f32.cu)
target_link_libraries(ft_cuda_ops_linear PUBLIC ft_cuda_core)
if(FLASHTIER_PTXAS_VERBOSE)
  target_compile_options(ft_cuda_ops_linear PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
endif()
