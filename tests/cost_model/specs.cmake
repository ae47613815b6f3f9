# Tests of the shared vocabulary (strata_specs): strict JSON reading, each spec's
# validation and round trip, the plan rules, Megatron's formulas, and every bundled config.
strata_add_test(specs_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/json_reader_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/model_spec_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/cluster_spec_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/train_spec_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/optimizer_schedule_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/plan_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/step_report_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/profile_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/configs_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/partition_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/layer_tensors_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/model_family_test.cc
  LIBS strata_specs)
