# Every plan of the CPU equivalence matrix (engine.cmake's strata_equivalence_plans, read
# here so that the list stays in one place: this fragment sorts after engine.cmake) passes
# the Program's deadlock check (cost_model/checks/program_check.h), as the engine would replay it,
# with the message sizes the engine's layers give.
list(JOIN strata_equivalence_plans "," strata_equivalence_plan_list)
strata_add_test(engine_program_check_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_program_check_test.cc
  LIBS strata_executor)  # model::make_dims: the engine's message size
target_compile_definitions(engine_program_check_test PRIVATE
  STRATA_EQUIVALENCE_PLANS="${strata_equivalence_plan_list}")
