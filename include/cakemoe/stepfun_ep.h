// cakemoe public API: the StepFun MoE layer under expert parallelism (EP) over NCCL. Each rank
// holds a contiguous range of the experts and its own tokens; one launch routes the rank's tokens,
// moves them to the ranks that own their experts, runs the local StepFun layer there and brings
// the weighted partial outputs back. Design and bounds: docs/decisions/stepfun-ep.md.
// No NCCL or CUDA types leak through this header: the communicator is an opaque pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "cakemoe/tensor.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

/// How tokens reach the experts and the partial outputs come back.
/// - kAllToAll: per-destination dispatch (a token goes once to each rank owning one of its
///   experts), counts exchanged on the device, grouped ncclSend/ncclRecv; partials come back the
///   same way and are summed per token in a fixed order (source rank, then slot): deterministic
///   for a given world size.
/// - kAllGather: every rank gathers every rank's tokens, runs its experts on all of them and the
///   partial outputs are summed by ncclReduceScatter (bf16, NCCL's summation order).
enum class Scheme : uint8_t { kAllToAll, kAllGather };
const char* scheme_name(Scheme scheme);        ///< "all_to_all", "all_gather"
Scheme parse_scheme(const std::string& name);  ///< throws InvalidArgument("scheme", ...)

/// An `ncclComm_t` passed as an opaque pointer. The caller creates it, owns it and keeps it alive
/// (and uses it for nothing else concurrently) for as long as the prepared launch exists.
using Communicator = void*;

/// Bytes of an NCCL unique id (ncclUniqueId, NCCL_UNIQUE_ID_BYTES).
constexpr size_t kUniqueIdBytes = 128;

/// A fresh NCCL unique id (ncclGetUniqueId): one rank makes it, every rank of the future
/// communicator passes the same bytes to create_communicator (for instance through a file or a
/// torch.distributed broadcast). Builds without NCCL throw Unsupported("unique_id", ...).
std::vector<uint8_t> new_unique_id();

/// An NCCL communicator made by create_communicator; it is destroyed (ncclCommDestroy) with this
/// object. Move-only. get() is what EpArgs::comm takes: keep this object alive for as long as any
/// launch prepared with it exists. A default-constructed one holds nothing (get() is null).
class OwnedCommunicator {
 public:
  OwnedCommunicator() = default;
  ~OwnedCommunicator();
  OwnedCommunicator(OwnedCommunicator&& other) noexcept;
  OwnedCommunicator& operator=(OwnedCommunicator&& other) noexcept;
  OwnedCommunicator(const OwnedCommunicator&) = delete;
  OwnedCommunicator& operator=(const OwnedCommunicator&) = delete;

  Communicator get() const { return comm_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }  ///< the CUDA device the communicator runs on
  /// Destroys the communicator now; get() is null afterwards. Does nothing when empty.
  void reset() noexcept;

 private:
  friend OwnedCommunicator create_communicator(const std::vector<uint8_t>&, int, int, int);
  OwnedCommunicator(Communicator comm, int rank, int world_size, int device);

  Communicator comm_ = nullptr;
  int rank_ = 0;
  int world_size_ = 0;
  int device_ = -1;
};

/// Collective over the `world_size` processes sharing `unique_id`: every rank calls it with its
/// own `rank` (ncclCommInitRank on CUDA device `device`; it returns once all ranks have joined).
/// Checks, before anything is created: unique_id has kUniqueIdBytes bytes, world_size >= 1,
/// 0 <= rank < world_size, device a CUDA device of this process (InvalidArgument naming the
/// argument). NCCL_NVLS_ENABLE and the other NCCL switches are the caller's environment. Builds
/// without NCCL check the arguments, then throw Unsupported("unique_id", ...).
OwnedCommunicator create_communicator(const std::vector<uint8_t>& unique_id, int rank,
                                      int world_size, int device);

/// Arguments of one rank.
struct EpArgs {
  Communicator comm = nullptr;  ///< this rank's communicator (rank and world size come from it)
  Scheme scheme = Scheme::kAllToAll;
  /// The rank's own tokens and its local experts, exactly as for prepare_stepfun_moe:
  /// hidden_states (+ scale, per_token_scale) and routing_logits xor topk_ids + topk_weights hold
  /// this rank's T tokens (T may differ between ranks); gemm*_weights and the per-expert vectors
  /// hold the experts [local_expert_offset, local_expert_offset + local_num_experts). The ranges
  /// of the ranks, in rank order, must tile [0, num_experts). `plan` (optional) is the plan of
  /// the local layer, which runs on world_size * max_T received rows; do_finalize must be true;
  /// `output` (optional) is bf16 [T, H]. All tensors on the communicator's CUDA device.
  MoeArgs layer;
};

/// Static sizes of a prepared EP layer (the worst case: launch never reads counts on the host,
/// so every NCCL transfer has this size whatever the routing).
struct EpSizes {
  int world_size = 0;
  int rank = 0;
  int64_t num_tokens = 0;          ///< T of this rank
  int64_t rows_per_peer = 0;       ///< max T over the ranks: a token goes at most once to a peer
  int64_t layer_rows = 0;          ///< world_size * rows_per_peer: tokens of the local layer
  int64_t dispatch_row_bytes = 0;  ///< hidden (+ scales) + ids + weights of one token
  int64_t combine_row_bytes = 0;   ///< one bf16 partial output row (2 H)
  /// Bytes this rank sends to other ranks per launch (its own rank excluded) in dispatch and in
  /// combine (all-to-all: rows_per_peer rows per peer each way; all-gather: the gather of its
  /// rows and its share of the ring reduce-scatter, as NCCL's ring moves them).
  int64_t dispatch_wire_bytes = 0;
  int64_t combine_wire_bytes = 0;
};

/// A prepared EP layer: owns every buffer; launch() allocates nothing, never synchronises the host
/// and can be captured in a CUDA graph. Valid for the T it was prepared with. Every rank must call
/// launch (or the same sequence of stage launches) the same number of times.
class EpLaunch {
 public:
  class Impl;
  EpLaunch();
  explicit EpLaunch(std::shared_ptr<Impl> impl);
  /// launch_dispatch + launch_layer + launch_combine.
  void launch(Stream stream = nullptr) const;
  /// Stages, for timing: routing of the own tokens and the dispatch exchange.
  void launch_dispatch(Stream stream = nullptr) const;
  /// The local StepFun layer on the received rows (its weighted partial outputs).
  void launch_layer(Stream stream = nullptr) const;
  /// Partials back to the tokens' ranks and the per-token sum into output().
  void launch_combine(Stream stream = nullptr) const;
  /// bf16 [T, H]: the layer's output for this rank's tokens.
  TensorView output() const;
  /// int32 [world_size] on the device: rows each rank sent here in the last launch (all-to-all;
  /// all-gather: that rank's T).
  TensorView received_counts() const;
  const EpSizes& sizes() const;
  const Plan& plan() const;  ///< the local layer's plan

 private:
  std::shared_ptr<Impl> impl_;
};

/// Collective: every rank of the communicator must call it (with its own arguments). Validates the
/// rank's arguments, exchanges token counts and expert ranges, checks that the ranks agree (family,
/// E, K, H, scheme, weight dtype) and allocates everything. A rank whose arguments are wrong
/// throws its own error after the exchange; the others throw InvalidArgument naming `comm`, so no
/// rank is left waiting. Builds without CUDA or NCCL throw Unsupported.
EpLaunch prepare(const EpArgs& args);

/// True when this build has the EP layer (CUDA and NCCL).
bool available();

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
