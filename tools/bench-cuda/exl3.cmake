# flashtier-bench-exl3: EXL3 GPU kernels (GEMV at the model's shapes, zero-copy grouped MoE,
# prefill) against HBM / PCIe / instruction-issue bounds measured in the same run, and cuBLASLt
# bf16 on the dense shapes where ft_bench_cublas_ref (tools/bench-cuda/cublas_ref.h) exists (a
# generator expression: that target may be described by a later .cmake file).
if(TARGET ft_cuda_exl3)
  add_executable(flashtier-bench-exl3 ${CMAKE_CURRENT_LIST_DIR}/bench_exl3.cpp ${CMAKE_CURRENT_LIST_DIR}/host_backing.cpp)
  target_link_libraries(flashtier-bench-exl3 PRIVATE ft_cuda_exl3
                        $<$<TARGET_EXISTS:ft_bench_cublas_ref>:ft_bench_cublas_ref>)
  target_compile_definitions(flashtier-bench-exl3 PRIVATE
                             $<$<TARGET_EXISTS:ft_bench_cublas_ref>:FT_HAVE_CUBLAS_REF=1>)
endif()
