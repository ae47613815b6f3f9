// Opens cuDNN on first use; see cudnn_library.h.
#include "kernels/cuda/cudnn_library.h"

#include <dlfcn.h>

#include <memory>
#include <type_traits>

#include <fmt/format.h>

#include "kernels/cuda/cudnn_entry_points.h"
#include "kernels/cuda/library_paths.h"

namespace strata::kernels::cuda {
namespace {

// cuDNN 9: the backend's SDPA graphs (cudnn_sdpa.h) are written against its API.
constexpr int kCudnnMajor = 9;
constexpr const char* kLibraryName = "libcudnn.so.9";

#if STRATA_HAVE_CUDNN_HEADERS
// Resolves every entry point into `lib`; "" or the first one missing.
std::string resolve_all(void* handle, CudnnLibrary& lib) {
  std::string missing;
  const auto resolve = [&](auto& fn, const char* name) {
    void* symbol = dlsym(handle, name);
    if (symbol == nullptr && missing.empty()) missing = name;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
  };
#define STRATA_RESOLVE(member) resolve(lib.member, "cudnn" #member)
  STRATA_RESOLVE(GetVersion);
  STRATA_RESOLVE(GetErrorString);
  STRATA_RESOLVE(GetLastErrorString);
  STRATA_RESOLVE(Create);
  STRATA_RESOLVE(Destroy);
  STRATA_RESOLVE(SetStream);
  STRATA_RESOLVE(BackendCreateDescriptor);
  STRATA_RESOLVE(BackendDestroyDescriptor);
  STRATA_RESOLVE(BackendSetAttribute);
  STRATA_RESOLVE(BackendGetAttribute);
  STRATA_RESOLVE(BackendFinalize);
  STRATA_RESOLVE(BackendExecute);
#undef STRATA_RESOLVE
  return missing;
}
#endif

}  // namespace

std::vector<std::string> cudnn_candidates(const std::string& runtime_dir,
                                          const std::vector<std::string>& site_packages) {
  std::vector<std::string> files = {kLibraryName};
  if (!runtime_dir.empty()) files.push_back(runtime_dir + "/" + kLibraryName);
  for (const std::string& site : site_packages) {
    if (!site.empty()) files.push_back(site + "/nvidia/cudnn/lib/" + kLibraryName);
  }
  return files;
}

CudnnLoad open_cudnn(const std::vector<std::string>& candidates) {
  CudnnLoad load;
#if STRATA_HAVE_CUDNN_HEADERS
  std::string tried;
  for (const std::string& file : candidates) {
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      tried += fmt::format("; {}: {}", file, error != nullptr ? error : "not found");
      continue;
    }
    auto lib = std::make_unique<CudnnLibrary>();
    if (const std::string missing = resolve_all(handle, *lib); !missing.empty()) {
      tried += fmt::format("; {}: has no {}", file, missing);
      dlclose(handle);
      continue;
    }
    const std::size_t version = lib->GetVersion();
    if (version / 10000 != kCudnnMajor) {
      tried += fmt::format("; {}: version {}, expected {}.x", file, cudnn_version_string(version),
                           kCudnnMajor);
      dlclose(handle);
      continue;
    }
    // Kept for the process's life: plans and handles made from it may live as long.
    load.library = lib.release();
    load.path = file;
    load.version = version;
    return load;
  }
  load.reason = candidates.empty() ? "no place to look for " + std::string(kLibraryName)
                                   : fmt::format("{} not usable{}", kLibraryName, tried);
#else
  (void)candidates;
  load.reason = "this strata was built without cuDNN's headers (cudnn_graph.h)";
#endif
  return load;
}

const CudnnLoad& cudnn() {
  // A function-local constant: looked for once, under the language's own lock.
  static const CudnnLoad load = [] {
    CudnnLoad first = open_cudnn(cudnn_candidates(cuda_runtime_directory(), {}));
    if (first.library != nullptr) return first;
    // Only then ask python3 where its packages are (a process of its own: ~30 ms); the
    // soname, tried above, is left out.
    std::vector<std::string> sites = cudnn_candidates("", python_site_packages());
    sites.erase(sites.begin());
    if (sites.empty()) {
      first.reason += "; no python3 site-packages to look in";
      return first;
    }
    CudnnLoad second = open_cudnn(sites);
    if (second.library != nullptr) return second;
    second.reason = first.reason + "; in python3's site-packages: " + second.reason;
    return second;
  }();
  return load;
}

std::string cudnn_version_string(std::size_t version) {
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

}  // namespace strata::kernels::cuda
