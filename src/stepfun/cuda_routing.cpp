// CUDA binders of the bitwise stages (routing, requant, finalize): fill the params of
// stepfun/routing_params.h, allocate the routing workspace, pick the kernel unit; the returned
// closure only enqueues (no allocation, no host sync, graph-capturable).
#if defined(CAKEMOE_WITH_CUDA)
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/cuda_util.h"
#include "core/kernel_registry.h"
#include "stepfun/catalog.h"
#include "stepfun/cuda_stages.h"
#include "stepfun/routing_params.h"

namespace cakemoe {
namespace stepfun {
namespace {

/// Workspace cap of the multi-CTA routing path, in int32 entries (chunks x E_loc).
constexpr int64_t kChunkCountsBudget = int64_t{1} << 23;
constexpr int64_t kMaxChunks = 1024;
constexpr int64_t kMinChunkSize = 512;  ///< expanded indices per chunk (warp) when possible

template <typename Launcher>
Launcher find_launcher(const char* stage, Device device) {
  const bool sm90 = arch_of(device) == Arch::kSm90;
  const core::KernelUnit* unit = core::find_kernel_unit("stepfun", stage, "", 0, sm90);
  if (unit == nullptr) {
    throw Unsupported("device", std::string("this build has no CUDA kernel unit for the StepFun ") +
                                    stage + " stage");
  }
  return reinterpret_cast<Launcher>(unit->launch);
}

/// Chunking of the multi-CTA path: ~kMinChunkSize indices per warp, workspace within budget.
void choose_chunks(int64_t num_expanded, int64_t num_local, RoutingParams* p) {
  const int64_t cap = std::max<int64_t>(1, std::min(kMaxChunks, kChunkCountsBudget / num_local));
  int64_t chunks = std::min(cap, (num_expanded + kMinChunkSize - 1) / kMinChunkSize);
  int64_t size = (num_expanded + chunks - 1) / chunks;
  size = (size + 31) / 32 * 32;  // whole warp steps
  chunks = (num_expanded + size - 1) / size;
  p->num_chunks = static_cast<int32_t>(chunks);
  p->chunk_size = static_cast<int32_t>(size);
}

}  // namespace

CudaEnqueue bind_cuda_routing(const RoutingArgs& a, const RoutingDims& d) {
  const int64_t num_tokens = d.num_tokens;
  const TableSizes sizes = table_sizes(num_tokens, a.top_k, a.num_experts, a.tile_tokens_dim);
  core::require(sizes.max_padded < std::numeric_limits<int32_t>::max(), "num_tokens",
                "max_padded + 1 = " + std::to_string(sizes.max_padded + 1) +
                    " must fit in int32");
  RoutingParams p;
  if (d.logits_input) {
    p.logits = a.routing_logits.data;
    p.logits_fp32 = d.logits_fp32;
    p.topk_weights = a.topk_weights.ptr<uint16_t>();
    p.topk_packed = a.topk_packed.ptr<int32_t>();
  } else {
    p.topk_ids = a.topk_ids.ptr<int32_t>();  // caller weights are never touched
  }
  p.expanded_idx_to_permuted_idx = a.expanded_idx_to_permuted_idx.ptr<int32_t>();
  p.permuted_idx_to_token_idx = a.permuted_idx_to_token_idx.ptr<int32_t>();
  p.cta_idx_xy_to_batch_idx = a.cta_idx_xy_to_batch_idx.ptr<int32_t>();
  p.cta_idx_xy_to_mn_limit = a.cta_idx_xy_to_mn_limit.ptr<int32_t>();
  p.num_tokens_per_expert = a.num_tokens_per_expert.ptr<int32_t>();
  p.num_non_exiting_ctas = a.num_non_exiting_ctas.ptr<int32_t>();
  p.total_num_padded_tokens = a.total_num_padded_tokens.ptr<int32_t>();
  p.histogram = a.expert_count_histogram.ptr<int32_t>();
  p.num_tokens = static_cast<int32_t>(num_tokens);
  p.top_k = static_cast<int32_t>(a.top_k);
  p.num_experts = static_cast<int32_t>(a.num_experts);
  p.local_expert_offset = static_cast<int32_t>(a.local_expert_offset);
  p.local_num_experts = static_cast<int32_t>(a.local_num_experts);
  p.tile = static_cast<int32_t>(a.tile_tokens_dim);
  p.max_ctas = static_cast<int32_t>(sizes.max_ctas);
  p.p2t_end = static_cast<int32_t>(
      std::min(a.permuted_idx_to_token_idx.numel(), sizes.max_padded + 1));
  p.routed_scaling_factor = static_cast<float>(a.routed_scaling_factor);
  p.scaled = a.routed_scaling_factor != 1.0;
  p.poison_tail = a.poison_routing_tail;

  // NOTE: enable_pdl is accepted and ignored: plain stream-ordered launches (decision doc).
  Tensor workspace;
  if (num_tokens > kRoutingSingleMaxTokens) {
    choose_chunks(num_tokens * a.top_k, a.local_num_experts, &p);
    workspace = Tensor::empty({int64_t{p.num_chunks} * a.local_num_experts}, DType::kInt32,
                              d.device);
    p.chunk_counts = workspace.ptr<int32_t>();
  }
  const RoutingLauncher launch = find_launcher<RoutingLauncher>("routing", d.device);
  return [p, launch, workspace](Stream stream) { launch(p, stream); };
}

CudaEnqueue bind_cuda_requant(const RequantArgs& a, int64_t rows) {
  RequantParams p;
  p.input = a.gemm1_output.ptr<uint16_t>();
  p.expanded_idx_to_permuted_idx = a.expanded_idx_to_permuted_idx.ptr<int32_t>();
  p.output = a.output.ptr<uint8_t>();
  p.output_scale = a.output_scale.ptr<uint8_t>();
  p.per_token_scale = a.per_token_scale.ptr<float>();
  p.rows = rows;
  p.cols = a.gemm1_output.shape[1];
  p.num_expanded = a.expanded_idx_to_permuted_idx.numel();
  p.sf_layout = a.sf_layout;
  p.global_scale_inv = static_cast<float>(a.global_scale_inv);  // rounded once, as the reference
  const RequantLauncher launch = find_launcher<RequantLauncher>("requant", a.gemm1_output.device);
  return [p, launch](Stream stream) { launch(p, stream); };
}

CudaEnqueue bind_cuda_finalize(const FinalizeArgs& a, int64_t hidden) {
  FinalizeParams p;
  p.gemm2_output = a.gemm2_output.ptr<uint16_t>();
  p.expert_weights = a.expert_weights.data;
  p.weights_fp32 = a.expert_weights.dtype == DType::kFP32;
  p.expanded_idx_to_permuted_idx = a.expanded_idx_to_permuted_idx.ptr<int32_t>();
  p.output = a.output.ptr<uint16_t>();
  p.num_tokens = a.expert_weights.shape[0];
  p.top_k = a.expert_weights.shape[1];
  p.hidden = hidden;
  p.gemm2_rows = a.gemm2_output.shape[0];
  const FinalizeLauncher launch =
      find_launcher<FinalizeLauncher>("finalize", a.gemm2_output.device);
  return [p, launch](Stream stream) { launch(p, stream); };
}

}  // namespace stepfun
}  // namespace cakemoe
#endif
