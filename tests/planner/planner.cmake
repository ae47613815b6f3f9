# The planner: generators on cases worked by hand, the search (counts, pruning, ranking,
# infeasible reports, determinism), and the best plan for Megatron's Table 1 models.
strata_add_test(planner_generators_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/generators_test.cc
  LIBS strata_planner)
strata_add_test(planner_search_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/planner_test.cc
  LIBS strata_planner)
strata_add_test(planner_megatron_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/megatron_test.cc
  LIBS strata_planner)
strata_add_test(planner_select_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/select_test.cc
  LIBS strata_planner)
strata_add_test(planner_sizing_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/sizing_test.cc
  LIBS strata_planner)
# select on several nodes: placement worked by hand and the inter-node pricing of wide ways.
strata_add_test(planner_select_nodes_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/select_nodes_test.cc
  LIBS strata_planner)
# Every plan the planner, sizing and select rank on the bundled clusters and models passes
# `strata run`'s own checks (executor/runtime/plan_checks.h, executor/comm/node_layout.h).
strata_add_test(planner_runnable_plans_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/runnable_plans_test.cc
  LIBS strata_planner strata_executor)
# The levers of a plan: the best named, each priced as predict() prices it.
strata_add_test(planner_levers_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/levers_test.cc
  LIBS strata_planner)
# Uneven splits ordered by the stage balance they give.
strata_add_test(planner_stage_balance_test IN planner_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/stage_balance_test.cc
  LIBS strata_planner)
