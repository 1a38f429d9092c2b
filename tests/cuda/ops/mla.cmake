flashtier_add_gpu_test(SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_indexer.cpp ${CMAKE_CURRENT_LIST_DIR}/test_mla.cpp
                       LIBS ft_cuda_ops_mla ft_ops)
