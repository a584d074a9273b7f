// The NCCL backend of the EP layer (host-only: it names NCCL types, so nvcc never sees it): the
// launch object and the helpers that prepare uses.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <cstdint>
#include <vector>

#include "cakemoe/stepfun.h"
#include "cakemoe/stepfun_ep.h"
#include "stepfun/ep/dispatch_plan.h"
#include "stepfun/ep/ep_impl.h"
#include "stepfun/ep/ep_kernels.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 12, 0)
#error "the StepFun EP layer needs NCCL >= 2.12 (bf16 reductions, p2p in CUDA graphs)"
#endif

namespace cakemoe {
namespace stepfun {
namespace ep {

/// Throws CudaError naming the NCCL call.
void nccl_check(ncclResult_t status, const char* call, const char* file, int line);
#define CAKEMOE_NCCL_CHECK(call) \
  ::cakemoe::stepfun::ep::nccl_check((call), #call, __FILE__, __LINE__)

/// All-gather of `mine` (same length on every rank) on a private stream; waits for the result
/// (prepare only).
std::vector<int64_t> exchange_words(ncclComm_t comm, int device, int world,
                                    const std::vector<int64_t>& mine);

class NcclEpLaunch final : public EpLaunch::Impl {
 public:
  ncclComm_t comm = nullptr;
  Scheme scheme = Scheme::kAllToAll;
  std::vector<Tensor> buffers;  ///< owned (kept alive with the launch)
  FieldLayout fields;

  // Own routing (routing_logits given): the router, then its packed ids unpacked.
  bool route_own_tokens = false;
  StepFunStageLaunch router;
  UnpackIdsParams unpack;

  // Dispatch.
  RouteParams route;
  PackParams pack;
  bool run_pack = false;  ///< all-gather: only when this rank has fewer rows than the largest
  MaskParams mask;
  std::vector<P2pOp> counts_ops, dispatch_schedule, combine_schedule;
  std::array<uint8_t*, kNumFields> send_rows{};  ///< all-to-all: send buffers; all-gather: sources
  std::array<uint8_t*, kNumFields> recv_rows{};
  uint8_t* send_counts = nullptr;
  uint8_t* recv_counts = nullptr;

  // Layer and combine.
  StepFunMoeLaunch layer;
  uint8_t* partials = nullptr;      ///< the layer's output [layer_rows, H]
  uint8_t* combine_recv = nullptr;  ///< all-to-all: the peers' partials of the own tokens
  CombineParams combine;
  void* scatter_dst = nullptr;  ///< all-gather: reduce-scatter destination
  bool copy_out = false;        ///< all-gather: scatter_dst is staging, copy T rows to output

  /// A device buffer owned by the launch, every byte `fill` (a handle sharing its storage).
  Tensor alloc(const std::vector<int64_t>& shape, DType dtype, int device, int fill = 0);

  void launch_dispatch(Stream stream) const override;
  void launch_layer(Stream stream) const override;
  void launch_combine(Stream stream) const override;

 private:
  void run_group(const std::vector<P2pOp>& ops, cudaStream_t stream) const;
};

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
