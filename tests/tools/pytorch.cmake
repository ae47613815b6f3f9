# strata's CPU backend against GPT-2 in plain PyTorch (tools/check_against_pytorch.py): the
# loss, the loss after one AdamW step and the saved weights' loss within 1e-5 relative, for
# the tiny model and a 12-layer GPT-2-shaped model on one rank and on t2 p2. Debian's
# python3-torch lives in the system interpreter, so that one is preferred; the script exits
# 77 (skipped) when torch cannot be imported.
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
