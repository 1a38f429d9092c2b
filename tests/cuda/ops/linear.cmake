# GPU tests of the dense linears and the dense MoE (ft_cuda_ops_linear) against shared/ops and
# double-precision references; the MoE test composes separate calls with ops/swiglu (misc group).
flashtier_add_gpu_test(SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_linear.cpp ${CMAKE_CURRENT_LIST_DIR}/test_moe.cpp
                       LIBS ft_cuda_ops_linear ft_cuda_ops_misc ft_ops ft_engine)
