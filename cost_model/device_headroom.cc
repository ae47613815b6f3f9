// The "device_headroom" block of profiles and cluster files; see device_headroom.h.
#include "cost_model/device_headroom.h"

#include <nlohmann/json.hpp>

#include "cost_model/units.h"

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

Json to_json(const DeviceHeadroom& d) {
  return Json{{"context_mib", d.context_bytes / units::kMiB},
              {"communicator_mib", d.communicator_bytes / units::kMiB},
              {"fragmentation_fraction", d.fragmentation_fraction},
              {"source", d.source}};
}

}  // namespace strata
