# Golden tests of the strata CLI: every tests/golden/<case>/ with an `args` file is one
# ctest test (label "golden") run by run_golden.cmake; STRATA_UPDATE_GOLDEN=1 rewrites them.
file(GLOB golden_args CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/golden/*/args)
list(SORT golden_args)
foreach(args_file IN LISTS golden_args)
  get_filename_component(case_dir ${args_file} DIRECTORY)
  get_filename_component(case_name ${case_dir} NAME)
  add_test(NAME golden.${case_name}
           COMMAND ${CMAKE_COMMAND} -DSTRATA=$<TARGET_FILE:strata> -DCASE_DIR=${case_dir}
                   -DWORK_DIR=${CMAKE_BINARY_DIR}/golden/${case_name}
                   -DCONFIG_DIR=${PROJECT_SOURCE_DIR}/configs
                   -P ${CMAKE_CURRENT_LIST_DIR}/run_golden.cmake.script)
  set_tests_properties(golden.${case_name} PROPERTIES LABELS golden)
endforeach()
