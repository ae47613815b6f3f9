# The config fuzzer's CI mode (tools/fuzz_configs.py): 150 mutants of each config kind
# (model, train, cluster, plan, profile, workload) through predict / plan / simulate /
# select --plan-only; no signal, no hang, exit 0/2/3 only, every exit-2 message one line
# naming the file and a key. ~10 s on the 2-core dev machine (30 s beside a build). The
# developer mode (1000 per kind, larger bases) is docs/correctness.md's command, not a test.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME fuzz.configs
           COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tools/fuzz_configs.py
                   --strata $<TARGET_FILE:strata> --mode ci --mutants 150 --jobs 2 --timeout 60)
  set_tests_properties(fuzz.configs PROPERTIES LABELS fuzz TIMEOUT 300)
endif()
