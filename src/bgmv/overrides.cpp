#include "bgmv/overrides.h"

#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"

namespace cakemoe {
namespace bgmv {
namespace {

constexpr ShrinkKind kShrinkKinds[] = {
    ShrinkKind::kRing2Stage,         ShrinkKind::kRing3Stage,
    ShrinkKind::kRegisters,          ShrinkKind::kRegistersOneTile,
    ShrinkKind::kRegistersHalfBlock, ShrinkKind::kRegistersQuarterBlock};

[[noreturn]] void bad(const std::string& what) { throw InvalidArgument("overrides", what); }

/// A small non-negative integer in [0, max] spelled exactly (no sign, no spaces).
int digit_value(const std::string& key, const std::string& value, int max) {
  if (value.size() != 1 || value[0] < '0' || value[0] - '0' > max) {
    bad(key + " must be 0.." + std::to_string(max) + ", got '" + value + "'");
  }
  return value[0] - '0';
}

ShrinkLaunch shrink_value(const std::string& value) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) bad("shrink must be KIND:SPLITS, got '" + value + "'");
  const std::string name = value.substr(0, colon), splits = value.substr(colon + 1);
  ShrinkLaunch launch;
  bool known = false;
  for (const ShrinkKind kind : kShrinkKinds) {
    if (name == shrink_kind_name(kind)) {
      launch.kind = kind;
      known = true;
    }
  }
  if (!known) bad("unknown shrink kind '" + name + "'");
  launch.splits = digit_value("shrink splits", splits, 9);
  return launch;
}

}  // namespace

PlanOverrides parse_plan_overrides(const std::string& text) {
  PlanOverrides o;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) bad("expected key=value, got '" + item + "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "variant") {
      if (value == "generic") {
        o.variant = Variant::kGeneric;
      } else if (value == "specialized") {
        o.variant = Variant::kSpecialized;
      } else if (value == "portable") {
        o.variant = Variant::kPortable;
      } else {
        bad("variant must be generic, specialized or portable, got '" + value + "'");
      }
    } else if (key == "specialized_schedule") {
      o.specialized_schedule = digit_value(key, value, 2);
    } else if (key == "shrink") {
      o.shrink = shrink_value(value);
    } else if (key == "generic_schedule") {
      o.generic_schedule = digit_value(key, value, 2);
    } else if (key == "launch_pdl_mode") {
      o.launch_pdl_mode = digit_value(key, value, 2);
    } else if (key == "fused_index") {
      o.fused_index = digit_value(key, value, 1) == 1;
    } else if (key == "grouped_stage") {
      o.grouped_stage = digit_value(key, value, 2);
    } else if (key == "packed_routes") {
      o.packed_routes = digit_value(key, value, 1) == 1;
    } else {
      bad("unknown key '" + key + "'");
    }
  }
  return o;
}

std::string describe_plan_overrides(const PlanOverrides& o) {
  std::vector<std::string> items;
  if (o.variant) items.push_back(std::string("variant=") + variant_name(*o.variant));
  if (o.specialized_schedule) {
    items.push_back("specialized_schedule=" + std::to_string(*o.specialized_schedule));
  }
  if (o.shrink) {
    items.push_back(std::string("shrink=") + shrink_kind_name(o.shrink->kind) + ":" +
                    std::to_string(o.shrink->splits));
  }
  if (o.generic_schedule) {
    items.push_back("generic_schedule=" + std::to_string(*o.generic_schedule));
  }
  if (o.launch_pdl_mode) items.push_back("launch_pdl_mode=" + std::to_string(*o.launch_pdl_mode));
  if (o.fused_index) items.push_back(std::string("fused_index=") + (*o.fused_index ? "1" : "0"));
  if (o.grouped_stage) items.push_back("grouped_stage=" + std::to_string(*o.grouped_stage));
  if (o.packed_routes) {
    items.push_back(std::string("packed_routes=") + (*o.packed_routes ? "1" : "0"));
  }
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ",") + item;
  return text;
}

}  // namespace bgmv
}  // namespace cakemoe
