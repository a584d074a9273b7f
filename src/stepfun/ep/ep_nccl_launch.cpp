// The launch stages of the NCCL EP layer: kernels and NCCL calls enqueued on the caller's stream
// only (no allocation, no host sync, graph-capturable).
#if defined(CAKEMOE_WITH_NCCL)
#include <string>

#include "cakemoe/errors.h"
#include "core/cuda_check.h"
#include "stepfun/ep/ep_nccl_host.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {
cudaStream_t as_cuda(Stream stream) { return static_cast<cudaStream_t>(stream); }
}  // namespace

void nccl_check(ncclResult_t status, const char* call, const char* file, int line) {
  if (status != ncclSuccess) {
    throw CudaError(
        call, std::string(ncclGetErrorString(status)) + " at " + file + ":" + std::to_string(line));
  }
}

Tensor NcclEpLaunch::alloc(const std::vector<int64_t>& shape, DType dtype, int device, int fill) {
  buffers.push_back(Tensor::empty(shape, dtype, Device::cuda(device)));
  CAKEMOE_CUDA_CHECK(cudaMemset(buffers.back().data(), fill, buffers.back().nbytes()));
  return buffers.back();
}

void NcclEpLaunch::run_group(const std::vector<P2pOp>& ops, cudaStream_t stream) const {
  CAKEMOE_NCCL_CHECK(ncclGroupStart());
  for (const P2pOp& op : ops) {
    uint8_t* base = nullptr;
    if (op.field == kCountsBuffer) {
      base = op.send ? send_counts : recv_counts;
    } else if (op.field == kPartialBuffer) {
      base = op.send ? partials : combine_recv;
    } else {
      base = op.send ? send_rows[op.field] : recv_rows[op.field];
    }
    if (op.send) {
      CAKEMOE_NCCL_CHECK(
          ncclSend(base + op.offset_bytes, op.bytes, ncclUint8, op.peer, comm, stream));
    } else {
      CAKEMOE_NCCL_CHECK(
          ncclRecv(base + op.offset_bytes, op.bytes, ncclUint8, op.peer, comm, stream));
    }
  }
  CAKEMOE_NCCL_CHECK(ncclGroupEnd());
}

void NcclEpLaunch::launch_dispatch(Stream stream) const {
  const cudaStream_t s = as_cuda(stream);
  if (route_own_tokens) {
    router.launch(stream);
    launch_unpack_ids(unpack, stream);
  }
  if (scheme == Scheme::kAllToAll) {
    // Counts first (device to device), then the static-size payload; the receiver masks the rows
    // beyond each source's count.
    launch_route(route, stream);
    run_group(counts_ops, s);
    launch_pack(pack, stream);
    run_group(dispatch_schedule, s);
    launch_mask(mask, stream);
    return;
  }
  if (run_pack) launch_pack(pack, stream);
  CAKEMOE_NCCL_CHECK(ncclGroupStart());
  for (int f = 0; f < kNumFields; ++f) {
    if (!fields.present(f)) continue;
    CAKEMOE_NCCL_CHECK(ncclAllGather(
        send_rows[f], recv_rows[f], sizes.rows_per_peer * fields.row_bytes[f], ncclUint8, comm, s));
  }
  CAKEMOE_NCCL_CHECK(ncclGroupEnd());
}

void NcclEpLaunch::launch_layer(Stream stream) const { layer.launch(stream); }

void NcclEpLaunch::launch_combine(Stream stream) const {
  const cudaStream_t s = as_cuda(stream);
  if (scheme == Scheme::kAllToAll) {
    run_group(combine_schedule, s);
    ep::launch_combine(combine, stream);
    return;
  }
  const int64_t hidden = sizes.combine_row_bytes / 2;
  CAKEMOE_NCCL_CHECK(ncclReduceScatter(partials, scatter_dst, sizes.rows_per_peer * hidden,
                                       ncclBfloat16, ncclSum, comm, s));
  if (copy_out) {
    CAKEMOE_CUDA_CHECK(
        cudaMemcpyAsync(output.data, scatter_dst, output.nbytes(), cudaMemcpyDeviceToDevice, s));
  }
}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
#endif
