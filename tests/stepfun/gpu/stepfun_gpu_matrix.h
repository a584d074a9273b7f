// Cases of the spec §10.3 matrix at full size, built so the host oracle stays affordable: one
// weight set per (family, limits, dims) shared by every routing regime and T (prepared once, kept
// on the device), and the fp64 oracle evaluated on at most `max_checked` evenly spaced tokens of
// each case (the oracle is per token; the routing tables are still compared for all T tokens).
// Data as in spec §10.3: hidden = 12*randn (bf16), W1 = randn/sqrt(H), W2 = randn/sqrt(I), logits
// randn shaped by the regime. Deviation from the CPU harness (make_layer): the activation scale
// a_gs is the fixed bound 2688/72 (nvfp4) or 448/72 (fp8) so one weight set serves every case;
// c_gs is calibrated per case on the checked tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cakemoe/stepfun.h"
#include "stepfun/gpu/stepfun_gpu_case.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace gpu_testbed {

struct MatrixWeights {
  reference::stepfun::LayerCase shape;      ///< family, H, I, E, K, limits, seed
  reference::stepfun::PreparedWeights host;  ///< c_gs not yet calibrated
  stepfun::MoeArgs device;                   ///< weight operands on device 0
  DevicePool pool;
};
/// `upload` false keeps the weights on the host only (device left empty): host-side checks.
std::unique_ptr<MatrixWeights> make_matrix_weights(const reference::stepfun::LayerCase& shape,
                                                   bool upload = true);

struct MatrixCase {
  reference::stepfun::LayerData check;  ///< the checked tokens only (config.num_tokens = count)
  std::vector<int64_t> checked;         ///< indices of the checked tokens in [0, T)
  stepfun::MoeArgs host;                ///< every token, CPU tensors, weights with this c_gs
  reference::stepfun::PreparedWeights weights;  ///< the case's weights (own scalar tensors)
  std::vector<Tensor> keep;             ///< storage of host's activations and routing inputs
};
/// A case of `tokens` tokens with the given regime; `precomputed` uses ids + fp32 weights.
MatrixCase make_matrix_case(const MatrixWeights& weights,
                            reference::stepfun::RoutingRegime regime, int64_t tokens,
                            bool precomputed, int64_t max_checked);

/// Device args of a case: the shared device weights, the case's scalars and inputs copied.
stepfun::MoeArgs device_case_args(const MatrixCase& c, const MatrixWeights& w, DevicePool& pool);

/// Rows `rows` of a row-major tensor (dim 0) as a new host tensor.
Tensor gather_rows(const TensorView& t, const std::vector<int64_t>& rows);

}  // namespace gpu_testbed
}  // namespace cakemoe
