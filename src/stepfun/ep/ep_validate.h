// Validation of the EP layer's arguments, plain C++: what one rank can check alone (before any
// allocation or NCCL call) and what the ranks must agree on once their descriptions are exchanged.
#pragma once

#include <cstdint>
#include <vector>

#include "cakemoe/stepfun_ep.h"
#include "stepfun/ep/dispatch_plan.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

/// One rank's description, exchanged at prepare as kWords int64 words.
struct RankInfo {
  static constexpr int kWords = 10 + kNumFields;
  int64_t status = 0;  ///< 0: ready; otherwise this rank threw (kRejected / kFailed)
  int64_t num_tokens = 0;
  int64_t expert_offset = 0;
  int64_t num_local_experts = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t hidden = 0;
  int64_t family = 0;
  int64_t scheme = 0;
  int64_t weights_dtype = 0;  ///< DType of the dispatched top-k weights
  FieldLayout fields;

  std::vector<int64_t> to_words() const;
  static RankInfo from_words(const int64_t* words);
};
constexpr int64_t kRejected = 1;  ///< the rank's own arguments failed validate_rank
constexpr int64_t kFailed = 2;    ///< the rank failed while allocating / preparing its layer

/// H of the layer from the W1 physical view (bf16 BlockMajorK [E, H/64, 2I, 64], the other
/// families [E, 2I, H] or [E, 2I, H/2]), as prepare_stepfun_moe derives it.
int64_t hidden_size_of(const MoeArgs& layer);

/// Everything one rank can check alone: communicator present, do_finalize, the own tokens
/// (row counts, dtypes of ids / weights / logits, contiguity, all on cuda:`device_index`), the
/// expert range and the output. The family formats of the tokens and the weights are checked by
/// the local layer's own validation at prepare (same argument names).
RankInfo validate_rank(const EpArgs& args, int device_index);

/// Rules across ranks (family, scheme, E, K, H, weight dtype and payload row sizes equal; the
/// expert ranges tile [0, E) in rank order). Throws InvalidArgument naming the argument and the
/// ranks; every rank sees the same infos, so every rank throws the same error.
void check_agreement(const std::vector<RankInfo>& infos);

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
