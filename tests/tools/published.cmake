# docs/cost-model.md's validation table through the CLI (tools/published_table.py): every published
# run predicted with --profile megatron-lm-2021 within its bound, the mean error within 10%.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME published.table
           COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tools/published_table.py
                   --strata $<TARGET_FILE:strata> --check)
  set_tests_properties(published.table PROPERTIES LABELS published TIMEOUT 120)
endif()
