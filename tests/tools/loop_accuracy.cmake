# Closing the loop on this machine (tools/loop_accuracy.py): calibrate once, feed the
# script's default feedback plans back into the profile (single, single-mb4, dp2-z0, dp2-z3,
# tp2, tp2-sp, tp2-dp2), then predict, run and compare 7 tiny-model plans held out from that
# feedback (ZeRO 1-2, pipelines plain, interleaved and recomputed, offload, 4-way DP): a
# plan is never graded on a profile fitted to its own runs (the script refuses the overlap).
# The script's own defaults are the tight bounds (15% step time, 5% memory, ranking within
# 5%: the benchmark, docs/calibration.md "Loop accuracy"); this CI test blocks on memory at
# 5% and keeps the time bounds at a factor of two, 100% on step time and on the ranking: they
# catch a prediction off by a factor (a missing pass, a collective priced on the wrong link, a unit
# slip), not the machine's noise. Why so loose on time: the machine is a shared 2-core VM
# whose speed moves by 20-30% between consecutive runs of the same plan (seen with nothing
# else runnable), and other jobs' processes delay every multi-rank step whose peer is
# descheduled; 4 rounds against a full calibration once still put the predicted fastest plan
# 50.2% behind the measured fastest (CI clone, 2026-11-23). So the test runs what a factor
# needs and no more: a quick calibration (~10 s instead of ~80 s) and 2 rounds of 6 steps
# (their mean), ~90 s instead of 240 s of a CI run that has it alone on the cores.
# Memory is exact arithmetic on both sides and keeps its tight bound. Label "loop", serial:
# parallel tests would be the noise.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME loop.accuracy
           COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tools/loop_accuracy.py
                   --strata $<TARGET_FILE:strata> --work ${CMAKE_BINARY_DIR}/loop_accuracy
                   --steps 6 --rounds 2 --retries 1 --quiet-timeout 10
                   --step-bound 1.0 --mem-bound 0.05 --rank-bound 1.0
                   --plans dp2-z1 dp2-z2 pp2 pp2-v2 pp2-rc dp2-off dp4-z1
                   "--calibrate-args=--quick --threads 1 --model tiny --micro-batch 1 --tp 1 2")
  # 900 s: alone it took ~120 s on the Intel VM; each run may first wait up to 10 s for a
  # quiet machine (28 runs), which a busy CI neighbour turns into minutes.
  set_tests_properties(loop.accuracy PROPERTIES LABELS loop RUN_SERIAL TRUE TIMEOUT 900)
endif()
