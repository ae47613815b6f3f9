// cuBLASLt, opened on first use (dlopen) instead of linked. Linking it costs every process
// that carries the CUDA backend its load-time initialisation, GPU or not: ~80 ms of a 0.1 s
// `strata predict` on a CPU machine (an empty program linked against libcublasLt.so.13 starts
// in 0.09-0.2 s instead of 0 s), paid by every command of a sweep or a test suite. The calls
// keep cuBLASLt's names and signatures: cublaslt().MatmulDescCreate(...) for
// cublasLtMatmulDescCreate(...).
#pragma once

#include <cublasLt.h>

namespace strata::kernels::cuda {

// The cuBLASLt entry points the kernels use, resolved from the library once.
struct CublasLtLibrary {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

// libcublasLt.so.<the major version compiled against>, from the loader's search path or else
// from the directory the CUDA runtime was loaded from (the toolkit's lib64 keeps both). Opened
// on the first call (thread-safe) and kept for the process's life, read-only after. Throws
// CudaError naming the library and dlerror()'s reason when it cannot be opened or lacks a
// symbol.
const CublasLtLibrary& cublaslt();

}  // namespace strata::kernels::cuda
