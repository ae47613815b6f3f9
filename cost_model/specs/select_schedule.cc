// Names of the multi-model policies (see select_schedule.h).
#include "cost_model/specs/select_schedule.h"

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {

std::string to_string(SelectPolicy policy) {
  switch (policy) {
    case SelectPolicy::kStrata: return "strata";
    case SelectPolicy::kLrtf: return "lrtf";
    case SelectPolicy::kSequential: return "sequential";
  }
  return "unknown";
}

SelectPolicy select_policy_from_string(const std::string& s) {
  if (s == "strata") return SelectPolicy::kStrata;
  if (s == "lrtf") return SelectPolicy::kLrtf;
  if (s == "sequential") return SelectPolicy::kSequential;
  throw ConfigError(fmt::format("--policy: value '{}', expected strata, lrtf or sequential", s));
}

}  // namespace strata
