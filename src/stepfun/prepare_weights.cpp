// Public weight / activation preparation (spec §4.3, §4.4, §9.4): validation, then the CPU
// reference preparation. CUDA tensors are validated the same way and then rejected (a later
// issue adds the device path).
#include <string>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "reference/stepfun/activations.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace stepfun {
namespace {

std::string device_name(Device d) {
  return d.type == DeviceType::kCPU ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

void require_cpu(const TensorView& t, const std::string& arg, const char* what) {
  if (t.device.type == DeviceType::kCPU) return;
  throw Unsupported(arg, std::string(what) + " on device " + device_name(t.device) +
                             " is not implemented yet; pass CPU tensors (reference engine)");
}

}  // namespace

StepFunWeights prepare_weights(const TensorView& w1, const TensorView& w2,
                               const WeightPrepOptions& options) {
  reference::stepfun::check_weight_inputs(w1, w2, options);
  require_cpu(w1, "w1", "weight preparation");
  return reference::stepfun::prepare_weights(w1, w2, options).view;
}

StepFunActivations prepare_activations(Family family, const TensorView& hidden,
                                       double hidden_states_scale_global) {
  reference::stepfun::check_activation_inputs(family, hidden, hidden_states_scale_global);
  require_cpu(hidden, "hidden", "activation preparation");
  return reference::stepfun::prepare_activations(family, hidden, hidden_states_scale_global);
}

}  // namespace stepfun
}  // namespace cakemoe
