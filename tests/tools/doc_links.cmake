# The README and docs/ pages (tools/check_doc_links.py): every relative link and #anchor
# resolves, every docs page is linked from the README, no heading names an issue, and the
# README stays a front page (at most 350 lines). The self-test shows the checker reports each
# kind of problem. Both well under a second.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME docs.links
           COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tools/check_doc_links.py
                   ${PROJECT_SOURCE_DIR})
  add_test(NAME docs.links_self_test
           COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tools/check_doc_links.py --self-test)
  set_tests_properties(docs.links docs.links_self_test PROPERTIES LABELS docs TIMEOUT 30)
endif()
