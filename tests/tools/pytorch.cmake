# strata's CPU backend against GPT-2 in plain PyTorch (tools/check_against_pytorch.py): the
# loss, the loss after one AdamW step and the saved weights' loss within 1e-5 relative, for
# the tiny model and a 12-layer GPT-2-shaped model on one rank and on t2 p2. Debian's
# python3-torch lives in the system interpreter, so that one is preferred; the script exits
# 77 (skipped) when torch cannot be imported, 1 (failed) under CI=true, where
# tools/install_deps.sh installs torch (tools.pytorch_check_fails_in_ci_without_torch).
find_program(STRATA_SYSTEM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT STRATA_SYSTEM_PYTHON)
  find_program(STRATA_SYSTEM_PYTHON python3)
endif()
if(STRATA_SYSTEM_PYTHON)
  add_test(NAME tools.check_against_pytorch
    COMMAND ${STRATA_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tools/check_against_pytorch.py
            --strata $<TARGET_FILE:strata> --work ${CMAKE_BINARY_DIR}/pytorch_check)
  set_tests_properties(tools.check_against_pytorch PROPERTIES
    LABELS "mpi;pytorch" SKIP_RETURN_CODE 77 PROCESSORS 2 TIMEOUT 900
    ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endif()
if(STRATA_SYSTEM_PYTHON)
  # The CUDA path's pieces that need no GPU (--backend cuda itself runs in
  # tools/device/gpu_session.sh's pytorch phase): arguments, strata command and files, token
  # file, loss comparison, and the bf16-autocast trainer on a tiny shape on the CPU (~5 s).
  add_test(NAME tools.check_against_pytorch_self_test
    COMMAND ${STRATA_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tools/check_against_pytorch.py --self-test)
  set_tests_properties(tools.check_against_pytorch_self_test PROPERTIES
    LABELS pytorch SKIP_RETURN_CODE 77 TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1")
  # The loss comparison the CUDA check prints (tools/loss_comparison.py): plain Python, so it
  # runs where torch is missing: a finite loss over the bound prints its relative error, a
  # NaN prints nan, both fail (< 1 s).
  add_test(NAME tools.loss_comparison_self_test
    COMMAND ${STRATA_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tools/loss_comparison.py)
  set_tests_properties(tools.loss_comparison_self_test PROPERTIES
    TIMEOUT 30 ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  # Without torch: skipped on a developer's machine, failed under CI=true (< 1 s).
  add_test(NAME tools.pytorch_check_fails_in_ci_without_torch
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/pytorch_skip_policy_test.sh
            ${STRATA_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tools/check_against_pytorch.py)
  set_tests_properties(tools.pytorch_check_fails_in_ci_without_torch PROPERTIES LABELS pytorch TIMEOUT 30)
  # The PyTorch Llama of the GPU check's llama phase (tools/bench/pytorch_llama.py), on the
  # CPU: tiny-llama for 2 eager steps, its output lines and figures (~5 s); and the same
  # rule without torch as check_against_pytorch.py. No bytecode: tools/__pycache__ appearing
  # midway would read as a change to the source tree in tools.gpu_session_dry_run beside it.
  add_test(NAME tools.pytorch_llama_cpu
    COMMAND ${STRATA_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/tools/pytorch_llama_cpu_test.py
            ${STRATA_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tools/bench/pytorch_llama.py
            ${PROJECT_SOURCE_DIR}/configs/models)
  set_tests_properties(tools.pytorch_llama_cpu PROPERTIES
    LABELS pytorch SKIP_RETURN_CODE 77 TIMEOUT 120
    ENVIRONMENT "OMP_NUM_THREADS=1;PYTHONDONTWRITEBYTECODE=1")
  add_test(NAME tools.pytorch_llama_fails_in_ci_without_torch
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/pytorch_skip_policy_test.sh
            ${STRATA_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tools/bench/pytorch_llama.py
            --model ${PROJECT_SOURCE_DIR}/configs/models/tiny-llama.json --micro-batch 1 --device cpu)
  set_tests_properties(tools.pytorch_llama_fails_in_ci_without_torch PROPERTIES
    LABELS pytorch TIMEOUT 30 ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
endif()
