// Where the CUDA libraries strata opens at run time (cuBLASLt, cuDNN) may be, beyond the
// loader's own search path: the directory of the CUDA runtime strata was loaded with (the
// toolkit's lib64 keeps them side by side), and the site-packages of the Python on PATH (NVIDIA's
// wheels, PyTorch's dependencies, keep them under nvidia/<library>/lib).
#pragma once

#include <string>
#include <vector>

namespace strata::kernels::cuda {

// The directory of the loaded CUDA runtime, or "" when it cannot be told.
std::string cuda_runtime_directory();

// python3's site-packages directories (its own and the user's), asked of python3 itself; empty
// when there is no python3 on PATH or it fails. Runs a process: call it once, when needed.
std::vector<std::string> python_site_packages();

}  // namespace strata::kernels::cuda
