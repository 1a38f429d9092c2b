# GPU tests of the KDA kernels (ft_cuda_ops_kda) against shared/ops/kda.h, norms.h and
# activations.h, at tiny and real widths.
flashtier_add_gpu_test(SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kda.cpp LIBS ft_cuda_ops_kda ft_ops)
