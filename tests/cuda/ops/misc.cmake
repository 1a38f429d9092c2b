# GPU tests of the per-token kernels (ft_cuda_ops_misc) against the fp32 reference ops.
flashtier_add_gpu_test(SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/test_norms.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_mhc.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_router.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_swiglu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_embed.cpp
  LIBS ft_cuda_ops_misc ft_cuda_ops_linear ft_ops)
