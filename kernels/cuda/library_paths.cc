// Where run-time-opened CUDA libraries may be (see library_paths.h).
#include "kernels/cuda/library_paths.h"

#include <dlfcn.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include <cuda_runtime.h>

namespace strata::kernels::cuda {

std::string cuda_runtime_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaGetErrorString), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

std::vector<std::string> python_site_packages() {
  constexpr const char* kCommand =
      "python3 -c 'import site; print(\"\\n\".join(site.getsitepackages() + "
      "[site.getusersitepackages()]))' 2>/dev/null";
  const std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(kCommand, "r"), pclose);
  std::vector<std::string> dirs;
  if (!pipe) return dirs;
  std::string line;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe.get()) != nullptr) {
    line += buffer;
    if (line.empty() || line.back() != '\n') continue;  // a longer line goes on
    line.pop_back();
    if (!line.empty()) dirs.push_back(line);
    line.clear();
  }
  if (!line.empty()) dirs.push_back(line);
  return dirs;
}

}  // namespace strata::kernels::cuda
