#include "tools/bench-cuda/cublas_ref.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace ft::bench {
namespace {

// The few entry points used, resolved by name (the header only supplies their types).
struct Lt {
  bool ok = false;
  std::string why;
  cublasLtHandle_t handle = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

template <class F>
bool resolve(void* lib, const char* name, F& f, std::string& why) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) why = std::string("symbol ") + name + " missing";
  return f != nullptr;
}

Lt& lt() {
  static Lt l;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("FLASHTIER_CUBLASLT");
    const std::string path = env && *env ? env : "libcublasLt.so.13";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      l.why = "cannot load " + path + (e ? std::string(": ") + e : std::string());
      return;
    }
    if (!resolve(lib, "cublasLtCreate", l.create, l.why) ||
        !resolve(lib, "cublasLtMatmulDescCreate", l.desc_create, l.why) ||
        !resolve(lib, "cublasLtMatmulDescDestroy", l.desc_destroy, l.why) ||
        !resolve(lib, "cublasLtMatmulDescSetAttribute", l.desc_set, l.why) ||
        !resolve(lib, "cublasLtMatrixLayoutCreate", l.layout_create, l.why) ||
        !resolve(lib, "cublasLtMatrixLayoutDestroy", l.layout_destroy, l.why) ||
        !resolve(lib, "cublasLtMatmulPreferenceCreate", l.pref_create, l.why) ||
        !resolve(lib, "cublasLtMatmulPreferenceDestroy", l.pref_destroy, l.why) ||
        !resolve(lib, "cublasLtMatmulPreferenceSetAttribute", l.pref_set, l.why) ||
        !resolve(lib, "cublasLtMatmulAlgoGetHeuristic", l.heuristic, l.why) ||
        !resolve(lib, "cublasLtMatmul", l.matmul, l.why))
      return;
    const cublasStatus_t s = l.create(&l.handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
      l.why = "cublasLtCreate failed (status " + std::to_string(static_cast<int>(s)) + ")";
      return;
    }
    l.ok = true;
  });
  return l;
}

// bf16 bits of uniform values in [−1, 1) (a fixed LCG: the rate must not depend on zeros).
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float f = static_cast<float>(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    v[i] = static_cast<uint16_t>(u >> 16);
  }
  return v;
}

}  // namespace

bool cublaslt_available(std::string* why) {
  Lt& l = lt();
  if (!l.ok && why) *why = l.why;
  return l.ok;
}

double cublaslt_gemm_ms(int64_t M, int64_t N, int64_t K, int reps) {
  Lt& l = lt();
  if (!l.ok || M <= 0 || N <= 0 || K <= 0 || reps <= 0) return -1;
  double result = -1;
  void *W = nullptr, *X = nullptr, *Y = nullptr, *ws = nullptr;
  const size_t ws_bytes = 32u << 20;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaStream_t stream = nullptr;
  do {
    if (cudaMalloc(&W, N * K * 2) != cudaSuccess || cudaMalloc(&X, M * K * 2) != cudaSuccess ||
        cudaMalloc(&Y, M * N * 2) != cudaSuccess || cudaMalloc(&ws, ws_bytes) != cudaSuccess)
      break;
    const std::vector<uint16_t> hw = random_bf16(N * K, 1), hx = random_bf16(M * K, 2);
    if (cudaMemcpy(W, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(X, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice) != cudaSuccess)
      break;
    if (l.desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) break;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    l.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    l.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    // Column-major views: A = W as [K, N] (ld K, op T → N×K), B = X as [K, M] (ld K), D = Y as [N, M].
    if (l.layout_create(&a, CUDA_R_16BF, K, N, K) != CUBLAS_STATUS_SUCCESS ||
        l.layout_create(&b, CUDA_R_16BF, K, M, K) != CUBLAS_STATUS_SUCCESS ||
        l.layout_create(&c, CUDA_R_16BF, N, M, N) != CUBLAS_STATUS_SUCCESS)
      break;
    if (l.pref_create(&pref) != CUBLAS_STATUS_SUCCESS) break;
    const uint64_t wsb = ws_bytes;
    l.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    if (l.heuristic(l.handle, op, a, b, c, c, pref, 1, &heur, &found) != CUBLAS_STATUS_SUCCESS || found < 1) break;
    if (cudaStreamCreate(&stream) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess)
      break;
    const float alpha = 1.0f, beta = 0.0f;
    auto run = [&] {
      return l.matmul(l.handle, op, &alpha, W, a, X, b, &beta, Y, c, Y, c, &heur.algo, ws, ws_bytes, stream) ==
             CUBLAS_STATUS_SUCCESS;
    };
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) ok = run();
    std::vector<float> ms;
    for (int i = 0; i < reps && ok; ++i) {
      cudaEventRecord(e0, stream);
      ok = run();
      cudaEventRecord(e1, stream);
      float t = 0;
      if (ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&t, e0, e1) == cudaSuccess)
        ms.push_back(t);
      else ok = false;
    }
    if (!ok || ms.empty()) break;
    std::sort(ms.begin(), ms.end());
    result = ms[ms.size() / 2];
  } while (false);
  if (pref) l.pref_destroy(pref);
  if (a) l.layout_destroy(a);
  if (b) l.layout_destroy(b);
  if (c) l.layout_destroy(c);
  if (op) l.desc_destroy(op);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (stream) cudaStreamDestroy(stream);
  cudaFree(W);
  cudaFree(X);
  cudaFree(Y);
  cudaFree(ws);
  (void)cudaGetLastError();  // a failed allocation must not poison the caller's next check
  return result;
}

}  // namespace ft::bench
