// Validation of the EP layer's arguments (see ep_validate.h).
#include "stepfun/ep/ep_validate.h"

#include <string>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "reference/stepfun/weights.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

using core::require;

std::vector<int64_t> RankInfo::to_words() const {
  std::vector<int64_t> w = {status,      num_tokens,   expert_offset, num_local_experts,
                            num_experts, top_k,        hidden,        family,
                            scheme,      weights_dtype};
  for (int64_t b : fields.row_bytes) w.push_back(b);
  return w;
}

RankInfo RankInfo::from_words(const int64_t* w) {
  RankInfo i;
  i.status = w[0];
  i.num_tokens = w[1];
  i.expert_offset = w[2];
  i.num_local_experts = w[3];
  i.num_experts = w[4];
  i.top_k = w[5];
  i.hidden = w[6];
  i.family = w[7];
  i.scheme = w[8];
  i.weights_dtype = w[9];
  for (int f = 0; f < kNumFields; ++f) i.fields.row_bytes[f] = w[10 + f];
  return i;
}

int64_t hidden_size_of(const MoeArgs& a) {
  core::check_defined(a.gemm1_weights, "gemm1_weights");
  const TensorView& w1 = a.gemm1_weights;
  const bool bf16 = a.family == Family::kBF16;
  require(w1.ndim == (bf16 ? 4 : 3), "gemm1_weights",
          std::string("family ") + family_name(a.family) + " expects a " + (bf16 ? "4" : "3") +
              "-D physical weight view, got " + w1.describe());
  if (bf16) return w1.shape[1] * 64;
  return w1.shape[2] * (reference::stepfun::is_nvfp4_family(a.family) ? 2 : 1);
}

namespace {

/// A per-token tensor: contiguous, on `device`, `rows` rows (dim 0); returns its bytes per row.
int64_t token_rows(const TensorView& t, const char* arg, int64_t rows, Device device) {
  core::check_contiguous(t, arg);
  core::check_device(t, arg, device);
  require(t.ndim >= 1 && t.shape[0] == rows, arg,
          "must have one row per token (" + std::to_string(rows) + "), got " + t.describe());
  return static_cast<int64_t>(t.nbytes()) / rows;
}

}  // namespace

RankInfo validate_rank(const EpArgs& args, int device_index) {
  const MoeArgs& a = args.layer;
  require(args.comm != nullptr, "comm", "must be an ncclComm_t, got a null pointer");
  require(args.scheme == Scheme::kAllToAll || args.scheme == Scheme::kAllGather, "scheme",
          "must be all_to_all or all_gather");
  require(a.do_finalize, "do_finalize",
          "must be true: the EP layer combines the ranks' finalized partial outputs");
  const Device device = Device::cuda(device_index);
  core::check_defined(a.hidden_states, "hidden_states");
  require(a.hidden_states.device == device, "hidden_states",
          "must be on the communicator's device " + core::device_string(device) + ", got " +
              a.hidden_states.describe());
  core::check_ndim(a.hidden_states, "hidden_states", 2);
  const int64_t t = a.hidden_states.shape[0];
  require(t > 0, "hidden_states", "needs T > 0 tokens");

  RankInfo info;
  info.num_tokens = t;
  info.family = static_cast<int64_t>(a.family);
  info.scheme = static_cast<int64_t>(args.scheme);
  info.num_experts = a.num_experts;
  info.top_k = a.top_k;
  info.expert_offset = a.local_expert_offset;
  info.num_local_experts = a.local_num_experts;
  require(a.num_experts > 0, "num_experts", "must be > 0, got " + std::to_string(a.num_experts));
  require(a.top_k >= 1 && a.top_k <= a.num_experts, "top_k",
          "must be in [1, num_experts], got " + std::to_string(a.top_k));
  require(a.local_expert_offset >= 0 && a.local_num_experts > 0 &&
              a.local_expert_offset + a.local_num_experts <= a.num_experts,
          "local_num_experts",
          "needs 0 <= local_expert_offset and 0 < local_num_experts with their sum <= "
          "num_experts");
  info.hidden = hidden_size_of(a);

  // Payload rows: hidden states (+ scales) as given, then ids and weights.
  info.fields.row_bytes[kHidden] = token_rows(a.hidden_states, "hidden_states", t, device);
  if (a.hidden_states_scale.defined()) {
    info.fields.row_bytes[kHiddenScale] =
        token_rows(a.hidden_states_scale, "hidden_states_scale", t, device);
  }
  if (a.per_token_scale.defined()) {
    core::check_operand(a.per_token_scale, "per_token_scale", {DType::kFP32}, device);
    core::check_ndim(a.per_token_scale, "per_token_scale", 1);
    core::check_min_numel(a.per_token_scale, "per_token_scale", t);
    info.fields.row_bytes[kPerTokenScale] = 4;
  }
  require(a.routing_logits.defined() != a.topk_ids.defined(), "routing_logits",
          "exactly one of routing_logits and topk_ids must be given");
  if (a.routing_logits.defined()) {
    core::check_operand(a.routing_logits, "routing_logits", {DType::kBF16, DType::kFP32}, device);
    core::check_shape(a.routing_logits, "routing_logits", {t, a.num_experts});
    core::check_absent(a.topk_weights, "topk_weights",
                       "with routing_logits the router computes the weights");
    info.weights_dtype = static_cast<int64_t>(DType::kBF16);  // the router's output
  } else {
    core::check_operand(a.topk_ids, "topk_ids", {DType::kInt32}, device);
    core::check_shape(a.topk_ids, "topk_ids", {t, a.top_k});
    core::check_operand(a.topk_weights, "topk_weights", {DType::kBF16, DType::kFP32}, device);
    core::check_shape(a.topk_weights, "topk_weights", {t, a.top_k});
    info.weights_dtype = static_cast<int64_t>(a.topk_weights.dtype);
  }
  info.fields.row_bytes[kTopkIds] = 4 * a.top_k;
  info.fields.row_bytes[kTopkWeights] =
      a.top_k * static_cast<int64_t>(dtype_size(static_cast<DType>(info.weights_dtype)));
  if (a.output.defined()) {
    core::check_operand(a.output, "output", {DType::kBF16}, device);
    core::check_shape(a.output, "output", {t, info.hidden});
  }
  if (a.plan) {
    require(a.plan->family == a.family, "plan", "was made for another family");
  }
  return info;
}

void check_agreement(const std::vector<RankInfo>& infos) {
  require(!infos.empty(), "comm", "needs at least one rank");
  const RankInfo& r0 = infos[0];
  for (size_t r = 1; r < infos.size(); ++r) {
    const RankInfo& ri = infos[r];
    const std::string ranks = " (rank 0 and rank " + std::to_string(r) + " differ)";
    require(ri.family == r0.family, "family", "must be the same on every rank" + ranks);
    require(ri.scheme == r0.scheme, "scheme", "must be the same on every rank" + ranks);
    require(ri.num_experts == r0.num_experts, "num_experts",
            "must be the same on every rank" + ranks);
    require(ri.top_k == r0.top_k, "top_k", "must be the same on every rank" + ranks);
    require(ri.hidden == r0.hidden, "gemm1_weights",
            "must imply the same hidden size on every rank" + ranks);
    require(ri.weights_dtype == r0.weights_dtype, "topk_weights",
            "must have the same dtype on every rank (routing_logits: bf16)" + ranks);
    for (int f = 0; f < kNumFields; ++f) {
      require(ri.fields.row_bytes[f] == r0.fields.row_bytes[f], field_name(f),
              "must have the same bytes per token on every rank" + ranks);
    }
  }
  std::vector<int64_t> offsets, counts;
  for (const RankInfo& ri : infos) {
    offsets.push_back(ri.expert_offset);
    counts.push_back(ri.num_local_experts);
  }
  make_partition(r0.num_experts, offsets, counts);
}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
