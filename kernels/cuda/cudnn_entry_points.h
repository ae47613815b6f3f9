// cuDNN's entry points as strata resolves them from the library (cudnn_library.h), for the
// files that build cuDNN graphs. Only with cuDNN's headers (STRATA_HAVE_CUDNN_HEADERS): a
// toolkit without them builds strata without the cuDNN path, which then says so.
#pragma once

#if __has_include(<cudnn_graph.h>)
#define STRATA_HAVE_CUDNN_HEADERS 1
#include <cudnn_graph.h>

namespace strata::kernels::cuda {

struct CudnnLibrary {
  decltype(&cudnnGetVersion) GetVersion;
  decltype(&cudnnGetErrorString) GetErrorString;
  decltype(&cudnnGetLastErrorString) GetLastErrorString;
  decltype(&cudnnCreate) Create;
  decltype(&cudnnDestroy) Destroy;
  decltype(&cudnnSetStream) SetStream;
  decltype(&cudnnBackendCreateDescriptor) BackendCreateDescriptor;
  decltype(&cudnnBackendDestroyDescriptor) BackendDestroyDescriptor;
  decltype(&cudnnBackendSetAttribute) BackendSetAttribute;
  decltype(&cudnnBackendGetAttribute) BackendGetAttribute;
  decltype(&cudnnBackendFinalize) BackendFinalize;
  decltype(&cudnnBackendExecute) BackendExecute;
};

}  // namespace strata::kernels::cuda
#else
#define STRATA_HAVE_CUDNN_HEADERS 0
#endif
