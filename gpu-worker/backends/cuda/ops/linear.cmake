# ft_cuda_ops_linear: dense fp16 linears (skinny and tiled kernels under one reduction
# contract), fp32 SIMT linears, and the dense grouped MoE (dispatch, experts, combine).
add_library(ft_cuda_ops_linear ${FLASHTIER_CUDA_LIBRARY_KIND}
  ${CMAKE_CURRENT_LIST_DIR}/linear_host.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_launch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_tma_map.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_to_f16.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear_f16.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear_f32.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_dispatch.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_dense.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_dense_f32.cu)
target_link_libraries(ft_cuda_ops_linear PUBLIC ft_cuda_core)
# The wgmma form of the tiled kernel exists only as sm_90a code (wgmma is not part of sm_90's
# forward-compatible set): one translation unit built for that target alone, whatever
# CMAKE_CUDA_ARCHITECTURES says; at run time linear_wgmma() checks the device can load it.
add_library(ft_cuda_ops_linear_sm90a OBJECT ${CMAKE_CURRENT_LIST_DIR}/linear_f16_wgmma.cu)
set_target_properties(ft_cuda_ops_linear_sm90a PROPERTIES CUDA_ARCHITECTURES OFF POSITION_INDEPENDENT_CODE ON)
target_compile_options(ft_cuda_ops_linear_sm90a PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a>)
target_link_libraries(ft_cuda_ops_linear_sm90a PRIVATE ft_cuda_core)
target_sources(ft_cuda_ops_linear PRIVATE $<TARGET_OBJECTS:ft_cuda_ops_linear_sm90a>)
if(FLASHTIER_PTXAS_VERBOSE)
  target_compile_options(ft_cuda_ops_linear PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  target_compile_options(ft_cuda_ops_linear_sm90a PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
endif()
