// The "device_headroom" block of profiles and cluster files; see device_headroom.h.
#include "cost_model/specs/device_headroom.h"

#include <nlohmann/json.hpp>

#include "cost_model/specs/units.h"

namespace strata {

DeviceHeadroom device_headroom_from_json(JsonObjectReader h) {
  DeviceHeadroom d;
  d.context_bytes = h.get_number("context_mib") * units::kMiB;
  h.require_non_negative("context_mib", d.context_bytes);
  d.communicator_bytes = h.get_number("communicator_mib") * units::kMiB;
  h.require_non_negative("communicator_mib", d.communicator_bytes);
  d.fragmentation_fraction = h.get_number("fragmentation_fraction");
  if (!(d.fragmentation_fraction >= 0 && d.fragmentation_fraction < 1)) {
    h.fail("fragmentation_fraction", std::to_string(d.fragmentation_fraction),
           "a fraction in [0, 1)");
  }
  d.source = h.get_string("source");
  h.finish();
  return d;
}

HostHeadroom host_headroom_from_json(JsonObjectReader h) {
  HostHeadroom d;
  d.reserved_fraction = h.get_number("reserved_fraction");
  if (!(d.reserved_fraction >= 0 && d.reserved_fraction < 1)) {
    h.fail("reserved_fraction", std::to_string(d.reserved_fraction), "a fraction in [0, 1)");
  }
  d.per_rank_bytes = h.get_number("per_rank_mib") * units::kMiB;
  h.require_non_negative("per_rank_mib", d.per_rank_bytes);
  d.source = h.get_string("source");
  h.finish();
  return d;
}

Json to_json(const HostHeadroom& d) {
  return Json{{"reserved_fraction", d.reserved_fraction},
              {"per_rank_mib", d.per_rank_bytes / units::kMiB},
              {"source", d.source}};
}

double usable_host_bytes(double host_memory_bytes, std::int64_t ranks, const HostHeadroom& h) {
  return host_memory_bytes * (1.0 - h.reserved_fraction) -
         static_cast<double>(ranks) * h.per_rank_bytes;
}

Json to_json(const DeviceHeadroom& d) {
  return Json{{"context_mib", d.context_bytes / units::kMiB},
              {"communicator_mib", d.communicator_bytes / units::kMiB},
              {"fragmentation_fraction", d.fragmentation_fraction},
              {"source", d.source}};
}

}  // namespace strata
