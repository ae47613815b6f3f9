# The select leaderboard's rule: validation loss at equal tokens, else the final training loss
# and the reason (plain gtest, no run).
strata_add_test(select_leaderboard_test IN executor_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/select_leaderboard_test.cc
  LIBS strata_executor)
