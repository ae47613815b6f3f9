// cuDNN, opened at run time (dlopen) like cuBLASLt (cublaslt_library.h) and NCCL: a machine
// without it still runs every CUDA job, on strata's own attention kernels, and says so.
// libcudnn.so.<major> is looked for (cudnn_candidates) on the loader's search path, beside the
// CUDA runtime strata was loaded with, and in the nvidia/cudnn/lib of a Python environment's
// site-packages (where PyTorch's cuDNN wheel puts it; python3 on PATH names them).
// The entry points keep cuDNN's names: lib.BackendCreateDescriptor(...) for
// cudnnBackendCreateDescriptor(...) (cudnn_entry_points.h, for the files that build graphs).
// Deliberately not here: graphs (cudnn_sdpa.h), choosing between cuDNN and the kernels
// (attention_choice.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace strata::kernels::cuda {

struct CudnnLibrary;  // the resolved entry points (cudnn_entry_points.h)

// The outcome of looking for cuDNN: the library, or why there is none.
struct CudnnLoad {
  const CudnnLibrary* library = nullptr;  // null: not usable (reason says why)
  std::string path;                       // the file opened, when one was
  std::size_t version = 0;                // cudnnGetVersion(), e.g. 91300 for 9.13.0
  std::string reason;                     // why library is null: each place tried and its error
};

// The files tried for cuDNN, in order: the bare soname (the loader's path), then
// DIR/libcudnn.so.<major> for DIR = runtime_dir and each SITE/nvidia/cudnn/lib. Empty
// directories are left out.
std::vector<std::string> cudnn_candidates(const std::string& runtime_dir,
                                          const std::vector<std::string>& site_packages);

// Opens the first of `candidates` that loads and has every entry point strata uses, and reads
// its version (no GPU needed). Never throws: a failure is a CudnnLoad with a reason naming each
// candidate and dlerror()'s words. A library that loaded is kept for the process's life.
CudnnLoad open_cudnn(const std::vector<std::string>& candidates);

// The process's cuDNN: open_cudnn over the candidates of this process (the CUDA runtime's
// directory, python3's site-packages), on the first call (thread-safe), then the same answer.
const CudnnLoad& cudnn();

// "9.13.0" for 91300 (cuDNN 9's version encoding, major * 10000 + minor * 100 + patch).
std::string cudnn_version_string(std::size_t version);

}  // namespace strata::kernels::cuda
