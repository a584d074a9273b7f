// prepare() of the NCCL EP layer: the rank validates its arguments, the ranks exchange their
// descriptions (and later whether they prepared), then every buffer and the local StepFun layer
// are set up once. A failing rank still takes part in both exchanges, so no rank hangs.
#if defined(CAKEMOE_WITH_NCCL)
#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "stepfun/ep/ep_nccl_host.h"
#include "stepfun/ep/ep_validate.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {

/// Makes `device` current for the scope (prepare allocates and copies on the comm's device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CAKEMOE_CUDA_CHECK(cudaGetDevice(&previous_));
    CAKEMOE_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

/// A stream of prepare's own, destroyed on every path.
class OwnedStream {
 public:
  OwnedStream() { CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~OwnedStream() { cudaStreamDestroy(stream_); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

template <typename T>
Tensor device_copy(NcclEpLaunch* impl, const std::vector<T>& host, DType dtype, int device) {
  const Tensor t = impl->alloc({static_cast<int64_t>(host.size())}, dtype, device);
  CAKEMOE_CUDA_CHECK(cudaMemcpy(t.data(), host.data(), t.nbytes(), cudaMemcpyHostToDevice));
  return t;
}

/// The rank's own top-k in logits mode: the StepFun router on its tokens, its packed ids
/// unpacked. NOTE: the router also builds permutation tables; one "local" expert keeps that work
/// minimal (the tables are not used).
void bind_own_router(const MoeArgs& a, int device, NcclEpLaunch* impl, TensorView* ids,
                     TensorView* weights) {
  const int64_t t = a.hidden_states.shape[0], k = a.top_k, e = a.num_experts, tile = 8;
  RoutingArgs r;
  r.routing_logits = a.routing_logits;
  r.topk_weights = impl->alloc({t, k}, DType::kBF16, device);
  r.topk_packed = impl->alloc({t, k}, DType::kInt32, device);
  r.expert_count_histogram = impl->alloc({std::max<int64_t>(2 * e, 512)}, DType::kInt32, device);
  r.total_num_padded_tokens = impl->alloc({1}, DType::kInt32, device);
  r.expanded_idx_to_permuted_idx = impl->alloc({t * k}, DType::kInt32, device);
  r.permuted_idx_to_token_idx = impl->alloc({max_padded(t, k, e, tile) + 1}, DType::kInt32, device);
  r.cta_idx_xy_to_batch_idx = impl->alloc({max_ctas(t, k, e, tile)}, DType::kInt32, device);
  r.cta_idx_xy_to_mn_limit = impl->alloc({max_ctas(t, k, e, tile)}, DType::kInt32, device);
  r.num_non_exiting_ctas = impl->alloc({1}, DType::kInt32, device);
  r.num_experts = e;
  r.top_k = k;
  r.local_expert_offset = 0;
  r.local_num_experts = 1;
  r.tile_tokens_dim = tile;
  r.routed_scaling_factor = a.routed_scaling_factor;
  r.enable_pdl = a.enable_pdl;
  impl->router = prepare_routing(r);
  impl->route_own_tokens = true;
  const Tensor unpacked = impl->alloc({t, k}, DType::kInt32, device);
  impl->unpack.topk_packed = r.topk_packed.ptr<int32_t>();
  impl->unpack.topk_ids = unpacked.ptr<int32_t>();
  impl->unpack.count = t * k;
  *ids = unpacked.view();
  *weights = r.topk_weights;
}

/// A [rows, ...] buffer shaped like the per-token tensor `like` (dtype and trailing dims).
Tensor rows_like(NcclEpLaunch* impl, const TensorView& like, int64_t rows, int device, int fill) {
  std::vector<int64_t> shape = like.sizes();
  shape[0] = rows;  // NOTE: a 1-D per_token_scale may be longer than T; it gets `rows` entries
  return impl->alloc(shape, like.dtype, device, fill);
}

/// Every buffer, the kernels' params, the NCCL schedules and the local layer of one rank.
std::shared_ptr<NcclEpLaunch> build(const EpArgs& args, const RankInfo& info, int rank,
                                    const ExpertPartition& partition,
                                    const std::vector<int64_t>& tokens_per_rank, ncclComm_t comm,
                                    int device) {
  const MoeArgs& a = args.layer;
  auto impl = std::make_shared<NcclEpLaunch>();
  impl->comm = comm;
  impl->scheme = args.scheme;
  impl->fields = info.fields;
  impl->sizes = ep_sizes(args.scheme, rank, tokens_per_rank, info.fields, info.hidden);
  const EpSizes& s = impl->sizes;
  const int world = s.world_size;
  const int64_t t = s.num_tokens, k = a.top_k, h = info.hidden, rows = s.rows_per_peer;
  const int64_t layer_rows = s.layer_rows;
  const bool all_to_all = args.scheme == Scheme::kAllToAll;

  // Own top-k ids and weights, and the per-token fields they come with.
  TensorView own[kNumFields];
  own[kHidden] = a.hidden_states;
  own[kHiddenScale] = a.hidden_states_scale;
  own[kPerTokenScale] = a.per_token_scale;
  if (a.routing_logits.defined()) {
    bind_own_router(a, device, impl.get(), &own[kTopkIds], &own[kTopkWeights]);
  } else {
    own[kTopkIds] = a.topk_ids;
    own[kTopkWeights] = a.topk_weights;
  }

  // Received rows (the local layer's tokens), one buffer per field; ids start as "routed
  // nowhere" (-1 bytes) so rows nobody fills never reach an expert.
  TensorView recv[kNumFields];
  for (int f = 0; f < kNumFields; ++f) {
    if (!impl->fields.present(f)) continue;
    recv[f] = rows_like(impl.get(), own[f], layer_rows, device, f == kTopkIds ? 0xFF : 0);
    impl->recv_rows[f] = recv[f].ptr<uint8_t>();
  }

  // Send side. All-to-all: per-peer regions filled by pack. All-gather: the own tensors, or a
  // staging copy of rows_per_peer rows when this rank has fewer tokens than the largest.
  impl->pack.rows_per_peer = static_cast<int32_t>(rows);
  const bool staging = all_to_all || t < rows;
  for (int f = 0; f < kNumFields; ++f) {
    if (!impl->fields.present(f)) continue;
    uint8_t* dst = own[f].ptr<uint8_t>();
    if (staging) {
      const int64_t region_rows = all_to_all ? layer_rows : rows;
      dst = rows_like(impl.get(), own[f], region_rows, device, f == kTopkIds ? 0xFF : 0)
                .ptr<uint8_t>();
      PackField& pf = impl->pack.fields[impl->pack.num_fields++];
      pf.src = own[f].ptr<uint8_t>();
      pf.dst = dst;
      pf.row_bytes = impl->fields.row_bytes[f];
      pf.word_bytes = widest_word(pf.src, pf.dst, pf.row_bytes);
    }
    impl->send_rows[f] = dst;
  }

  // Layer outputs (partials) and the rank's output.
  impl->partials = impl->alloc({layer_rows, h}, DType::kBF16, device).ptr<uint8_t>();
  impl->output = a.output.defined() ? a.output : impl->alloc({t, h}, DType::kBF16, device).view();

  if (all_to_all) {
    const Tensor owner = device_copy(impl.get(), partition.owner_table(), DType::kInt32, device);
    const Tensor counts_out = impl->alloc({world}, DType::kInt32, device);
    const Tensor counts_in = impl->alloc({world}, DType::kInt32, device);
    const Tensor slot_of = impl->alloc({t, world}, DType::kInt32, device);
    const Tensor token_of_row = impl->alloc({world, rows}, DType::kInt32, device);
    RouteParams& r = impl->route;
    r.topk_ids = own[kTopkIds].ptr<int32_t>();
    r.owner_of_expert = owner.ptr<int32_t>();
    r.num_tokens = static_cast<int32_t>(t);
    r.top_k = static_cast<int32_t>(k);
    r.num_experts = static_cast<int32_t>(a.num_experts);
    r.world_size = world;
    r.rows_per_peer = static_cast<int32_t>(rows);
    r.send_counts = counts_out.ptr<int32_t>();
    r.slot_of = slot_of.ptr<int32_t>();
    r.token_of_send_row = token_of_row.ptr<int32_t>();
    impl->pack.token_of_send_row = r.token_of_send_row;
    impl->pack.send_counts = r.send_counts;
    impl->pack.regions = world;
    impl->mask.recv_ids = recv[kTopkIds].ptr<int32_t>();
    impl->mask.recv_counts = counts_in.ptr<int32_t>();
    impl->mask.world_size = world;
    impl->mask.rows_per_peer = static_cast<int32_t>(rows);
    impl->mask.top_k = static_cast<int32_t>(k);
    impl->send_counts = counts_out.ptr<uint8_t>();
    impl->recv_counts = counts_in.ptr<uint8_t>();
    impl->received_counts = counts_in.view();
    impl->counts_ops = counts_exchange_ops(world);
    impl->dispatch_schedule = dispatch_ops(s, impl->fields);
    impl->combine_schedule = combine_ops(s);
    impl->combine_recv = impl->alloc({layer_rows, h}, DType::kBF16, device).ptr<uint8_t>();
    CombineParams& c = impl->combine;
    c.partials = reinterpret_cast<const uint16_t*>(impl->combine_recv);
    c.slot_of = r.slot_of;
    c.output = impl->output.ptr<uint16_t>();
    c.num_tokens = static_cast<int32_t>(t);
    c.world_size = world;
    c.rows_per_peer = static_cast<int32_t>(rows);
    c.hidden = h;
    c.vector_access = h % 8 == 0 && reinterpret_cast<uintptr_t>(c.partials) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(c.output) % 16 == 0;
  } else {
    // Identity pack into the staging rows (only when t < rows); the ids of rows >= t stay -1.
    std::vector<int32_t> identity(static_cast<size_t>(rows), -1);
    std::iota(identity.begin(), identity.begin() + t, 0);
    impl->pack.token_of_send_row =
        device_copy(impl.get(), identity, DType::kInt32, device).ptr<int32_t>();
    impl->pack.send_counts = device_copy(impl.get(), std::vector<int32_t>{static_cast<int32_t>(t)},
                                         DType::kInt32, device)
                                 .ptr<int32_t>();
    impl->pack.regions = 1;
    impl->run_pack = staging;
    std::vector<int32_t> counts(tokens_per_rank.begin(), tokens_per_rank.end());
    impl->received_counts = device_copy(impl.get(), counts, DType::kInt32, device).view();
    impl->copy_out = t < rows;
    impl->scatter_dst =
        impl->copy_out ? impl->alloc({rows, h}, DType::kBF16, device).data() : impl->output.data;
  }

  // The local layer on the received rows, in precomputed-routing mode.
  MoeArgs layer = a;
  layer.hidden_states = recv[kHidden];
  layer.hidden_states_scale = recv[kHiddenScale];
  layer.per_token_scale = recv[kPerTokenScale];
  layer.routing_logits = TensorView();
  layer.topk_ids = recv[kTopkIds];
  layer.topk_weights = recv[kTopkWeights];
  layer.output = TensorView(impl->partials, DType::kBF16, {layer_rows, h}, Device::cuda(device));
  layer.do_finalize = true;
  impl->layer = prepare_stepfun_moe(layer);
  impl->plan = impl->layer.plan();
  CAKEMOE_CUDA_CHECK(cudaDeviceSynchronize());  // the fills and copies above are done
  return impl;
}

}  // namespace

std::vector<int64_t> exchange_words(ncclComm_t comm, int device, int world,
                                    const std::vector<int64_t>& mine) {
  const int64_t n = static_cast<int64_t>(mine.size());
  Tensor buffer = Tensor::empty({(world + 1) * n}, DType::kInt64, Device::cuda(device));
  int64_t* gathered = buffer.ptr<int64_t>();
  int64_t* own = gathered + world * n;
  std::vector<int64_t> all(static_cast<size_t>(world * n));
  const OwnedStream stream;
  CAKEMOE_CUDA_CHECK(
      cudaMemcpyAsync(own, mine.data(), n * 8, cudaMemcpyHostToDevice, stream.get()));
  CAKEMOE_NCCL_CHECK(ncclAllGather(own, gathered, n, ncclInt64, comm, stream.get()));
  CAKEMOE_CUDA_CHECK(
      cudaMemcpyAsync(all.data(), gathered, world * n * 8, cudaMemcpyDeviceToHost, stream.get()));
  CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  return all;
}

EpLaunch prepare(const EpArgs& args) {
  core::require(args.comm != nullptr, "comm", "must be an ncclComm_t, got a null pointer");
  const ncclComm_t comm = static_cast<ncclComm_t>(args.comm);
  int world = 0, rank = 0, device = 0;
  CAKEMOE_NCCL_CHECK(ncclCommCount(comm, &world));
  CAKEMOE_NCCL_CHECK(ncclCommUserRank(comm, &rank));
  CAKEMOE_NCCL_CHECK(ncclCommCuDevice(comm, &device));
  const DeviceGuard guard(device);

  // 1. The rank's own arguments; a rejected rank still joins the exchange, then throws.
  RankInfo info;
  std::exception_ptr own_error;
  try {
    info = validate_rank(args, device);
  } catch (...) {
    own_error = std::current_exception();
    info = RankInfo();
    info.status = kRejected;
  }
  const std::vector<int64_t> words = exchange_words(comm, device, world, info.to_words());
  std::vector<RankInfo> infos;
  for (int r = 0; r < world; ++r)
    infos.push_back(RankInfo::from_words(&words[r * RankInfo::kWords]));
  if (own_error) std::rethrow_exception(own_error);
  for (int r = 0; r < world; ++r) {
    core::require(infos[r].status == 0, "comm",
                  "rank " + std::to_string(r) + " rejected its arguments (see its error)");
  }

  // 2. Agreement across ranks (the same infos everywhere: every rank throws alike).
  check_agreement(infos);
  std::vector<int64_t> offsets, counts, tokens;
  for (const RankInfo& ri : infos) {
    offsets.push_back(ri.expert_offset);
    counts.push_back(ri.num_local_experts);
    tokens.push_back(ri.num_tokens);
  }
  const ExpertPartition partition = make_partition(info.num_experts, offsets, counts);

  // 3. Buffers and the local layer; whether every rank made it is exchanged once more.
  std::shared_ptr<NcclEpLaunch> impl;
  try {
    impl = build(args, info, rank, partition, tokens, comm, device);
  } catch (...) {
    own_error = std::current_exception();
  }
  const std::vector<int64_t> status =
      exchange_words(comm, device, world, {own_error ? kFailed : int64_t{0}});
  if (own_error) std::rethrow_exception(own_error);
  for (int r = 0; r < world; ++r) {
    core::require(status[r] == 0, "comm",
                  "rank " + std::to_string(r) + " failed to prepare its layer (see its error)");
  }
  return EpLaunch(impl);
}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
#endif
