// Which middle of the steady phase the memory walk may skip (see steady_cut.h for why).
#include "cost_model/program/steady_cut.h"

#include <algorithm>

#include "cost_model/program/schedule.h"

namespace strata {

SteadyCut steady_cut(ScheduleKind kind, std::int64_t p, std::int64_t v, std::int64_t m,
                     std::int64_t r) {
  SteadyCut cut;
  cut.micro_batches = m;
  if (kind == ScheduleKind::kGpipe) return cut;
  const bool interleaved = kind == ScheduleKind::kInterleaved && v > 1;
  const std::int64_t total = m * v;
  const std::int64_t warmup = warmup_forwards(kind, p, v, m, r);
  const std::int64_t steady = total - warmup;
  const std::int64_t period = interleaved ? p * v : 1;       // pairs
  const std::int64_t period_micro_batches = interleaved ? p : 1;
  const std::int64_t front = 2 * period + 4, back = period + 4;
  if (steady < front + back + period) return cut;
  const std::int64_t periods = (steady - front - back) / period;
  cut.micro_batches = m - periods * period_micro_batches;
  cut.shift = m - cut.micro_batches;
  cut.from_pass = warmup + 2 * front;
  return cut;
}

}  // namespace strata
