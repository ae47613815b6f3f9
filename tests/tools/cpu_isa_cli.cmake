# STRATA_CPU_ISA (kernels/cpu/isa.h) that names no level, or one above this CPU's: strata
# says so on one line, naming the variable, the value and what it expected, and exits 2
# before any work (here a plan, which would otherwise succeed).
foreach(value avx9 avx-512)
  add_test(NAME strata_cli.cpu_isa_unknown_${value}
           COMMAND sh -c "STRATA_CPU_ISA=${value} \"$0\" plan --model tiny --cluster local-cpu --train tiny >/dev/null 2>\"$1\"; rc=$?; cat \"$1\"; echo \"exit code $rc\""
                   $<TARGET_FILE:strata> ${CMAKE_CURRENT_BINARY_DIR}/cpu_isa_${value}.err)
  set_tests_properties(strata_cli.cpu_isa_unknown_${value} PROPERTIES
    ENVIRONMENT "STRATA_CONFIG_DIR=${PROJECT_SOURCE_DIR}/configs"
    PASS_REGULAR_EXPRESSION "^strata: error: STRATA_CPU_ISA = '${value}': not a level the CPU kernels know; expected baseline, avx2 or avx512[^\n]*\nexit code 2\n$"
    LABELS tools)
endforeach()
