// Public weight / activation preparation (spec §4.3, §4.4, §9.4): validation, then the CPU
// reference preparation. CUDA inputs are copied to the host, prepared there and the results copied
// back to the same device (stepfun/device_prep.h); a device quantizer is a later optimisation.
#include <string>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "reference/stepfun/activations.h"
#include "reference/stepfun/weights.h"
#include "stepfun/device_prep.h"

namespace cakemoe {
namespace stepfun {

StepFunWeights prepare_weights(const TensorView& w1, const TensorView& w2,
                               const WeightPrepOptions& options) {
  reference::stepfun::check_weight_inputs(w1, w2, options);
  if (w1.device.type == DeviceType::kCPU) {
    return reference::stepfun::prepare_weights(w1, w2, options).view;
  }
  require_device_memory(w1, "w1", "weight preparation");
  require_device_memory(w2, "w2", "weight preparation");
  const Tensor w1_host = to_host(w1), w2_host = to_host(w2);
  StepFunWeights out = reference::stepfun::prepare_weights(w1_host, w2_host, options).view;
  for (Tensor* t : reference::stepfun::weight_tensors(&out)) *t = to_device_of(*t, w1.device);
  return out;
}

StepFunActivations prepare_activations(Family family, const TensorView& hidden,
                                       double hidden_states_scale_global) {
  reference::stepfun::check_activation_inputs(family, hidden, hidden_states_scale_global);
  if (hidden.device.type == DeviceType::kCPU) {
    return reference::stepfun::prepare_activations(family, hidden, hidden_states_scale_global);
  }
  require_device_memory(hidden, "hidden", "activation preparation");
  StepFunActivations out = reference::stepfun::prepare_activations(family, to_host(hidden),
                                                                   hidden_states_scale_global);
  for (Tensor* t : {&out.hidden_states, &out.hidden_states_scale, &out.per_token_scale}) {
    *t = to_device_of(*t, hidden.device);
  }
  return out;
}

}  // namespace stepfun
}  // namespace cakemoe
