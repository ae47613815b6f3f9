# Closing the loop on this machine (tools/loop_accuracy.py): calibrate once, feed the
# script's default feedback plans back into the profile (single, single-mb4, dp2-z0, dp2-z3,
# tp2, tp2-sp, tp2-dp2), then predict, run and compare 7 tiny-model plans held out from that
# feedback (ZeRO 1-2, pipelines plain, interleaved and recomputed, offload, 4-way DP): a
# plan is never graded on a profile fitted to its own runs (the script refuses the overlap).
# The script's own defaults are the tight bounds (15% step time, 5% memory, ranking within
# 5%); this CI test blocks on memory at 5% and keeps the time bounds loose, 50% on step time
# and on the ranking: they catch a prediction off by a factor, not the machine's noise.
# Why looser on time: the machine is a shared 2-core VM whose speed moves by 20-30% between
# consecutive runs of the same plan (seen with nothing else runnable), and other jobs'
# processes delay every multi-rank step whose peer is descheduled; 4 rounds of 6 steps per plan (the middle two kept) cannot average that out
# within 3 minutes. One round was not enough even for 50%: a single slow-mode draw put the
# predicted fastest plan 50.2% behind the measured fastest (CI clone, 2026-11-23).
# Memory is exact arithmetic on both sides and keeps its tight bound. Label "loop", serial:
# parallel tests would be the noise.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME loop.accuracy
           COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tools/loop_accuracy.py
                   --strata $<TARGET_FILE:strata> --work ${CMAKE_BINARY_DIR}/loop_accuracy
                   --steps 6 --rounds 4 --retries 1 --quiet-timeout 10
                   --step-bound 0.5 --mem-bound 0.05 --rank-bound 0.5
                   --plans dp2-z1 dp2-z2 pp2 pp2-v2 pp2-rc dp2-off dp4-z1
                   "--calibrate-args=--threads 1 --model tiny --micro-batch 1 --tp 1 2")
  # 900 s: alone it took ~120 s on the Intel VM; each run may first wait up to 10 s for a
  # quiet machine (56 runs), which a busy CI neighbour turns into minutes.
  set_tests_properties(loop.accuracy PROPERTIES LABELS loop RUN_SERIAL TRUE TIMEOUT 900)
endif()
