// Opens cuBLASLt on first use; see cublaslt_library.h.
#include "kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <string>

#include <fmt/format.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/library_paths.h"

namespace strata::kernels::cuda {
namespace {

#define STRATA_STRINGIFY_VALUE(x) #x
#define STRATA_STRINGIFY(x) STRATA_STRINGIFY_VALUE(x)
constexpr const char* kLibraryName = "libcublasLt.so." STRATA_STRINGIFY(CUBLAS_VER_MAJOR);

void* open_library() {
  if (void* handle = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first_error = dlerror();
  const std::string dir = cuda_runtime_directory();
  if (!dir.empty()) {
    const std::string beside_runtime = dir + "/" + kLibraryName;
    if (void* handle = dlopen(beside_runtime.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  throw CudaError(fmt::format(
      "cannot open {} (cuBLASLt, for the CUDA backend's GEMMs): {}; install the CUDA toolkit's "
      "cuBLAS or put its lib64 on LD_LIBRARY_PATH",
      kLibraryName, first_error));
}

template <typename Fn>
void resolve(void* handle, Fn& fn, const char* name) {
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    throw CudaError(fmt::format("{} has no {}: {}", kLibraryName, name, dlerror()));
  }
  fn = reinterpret_cast<Fn>(symbol);
}

CublasLtLibrary load() {
  void* handle = open_library();  // never closed: the library lives as long as the process
  CublasLtLibrary lib{};
#define STRATA_RESOLVE(member) resolve(handle, lib.member, "cublasLt" #member)
  STRATA_RESOLVE(Create);
  STRATA_RESOLVE(Destroy);
  STRATA_RESOLVE(GetStatusName);
  STRATA_RESOLVE(GetStatusString);
  STRATA_RESOLVE(Matmul);
  STRATA_RESOLVE(MatmulAlgoGetHeuristic);
  STRATA_RESOLVE(MatmulDescCreate);
  STRATA_RESOLVE(MatmulDescDestroy);
  STRATA_RESOLVE(MatmulDescSetAttribute);
  STRATA_RESOLVE(MatmulPreferenceCreate);
  STRATA_RESOLVE(MatmulPreferenceDestroy);
  STRATA_RESOLVE(MatmulPreferenceSetAttribute);
  STRATA_RESOLVE(MatrixLayoutCreate);
  STRATA_RESOLVE(MatrixLayoutDestroy);
#undef STRATA_RESOLVE
  return lib;
}

}  // namespace

const CublasLtLibrary& cublaslt() {
  // A function-local constant: initialised once, under the language's own lock; a failed
  // open throws and the next call tries again.
  static const CublasLtLibrary library = load();
  return library;
}

}  // namespace strata::kernels::cuda
