// The one source of strata_test_pch (tests/CMakeLists.txt): the target exists to build the
// precompiled header every test binary reuses.
