# ft_cuda_ops_misc: the per-token kernels — norms, mHC sites (+ Sinkhorn), router selection,
# clamped SwiGLU, embedding and final norm (twins of shared/ops/{norms,mhc,router,swiglu} and of
# ReferenceEngine::forward's prologue/epilogue).
add_library(ft_cuda_ops_misc ${FLASHTIER_CUDA_LIBRARY_KIND}
  ${CMAKE_CURRENT_LIST_DIR}/norms.cu
  ${CMAKE_CURRENT_LIST_DIR}/mhc.cu
  ${CMAKE_CURRENT_LIST_DIR}/router.cu
  ${CMAKE_CURRENT_LIST_DIR}/swiglu.cu
  ${CMAKE_CURRENT_LIST_DIR}/embed.cu)
target_link_libraries(ft_cuda_ops_misc PUBLIC ft_cuda_core)
# CMake 3.25 turns the inherited C++20 into a CUDA20 dialect it cannot spell (toolchain.md P4);
# not required, so it adds no -std and CMAKE_CUDA_FLAGS' -std=c++20 stands.
set_target_properties(ft_cuda_ops_misc PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED OFF)
