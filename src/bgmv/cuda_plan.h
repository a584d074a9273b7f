// CUDA runtime of a prepared BGMV plan (spec bgmv §8): device workspaces allocated at prepare,
// the launch sequence of the chosen path, and the private CUDA graph replayed by run(). Plain
// C++ (no CUDA types); implemented in cuda_plan.cpp, which builds without CUDA to stubs.
#pragma once

#include <memory>
#include <mutex>

#include "bgmv/grouped_launch.h"
#include "cakemoe/tensor.h"

namespace cakemoe {
namespace bgmv {

/// What a CUDA plan launches: one of the three sequences of spec §4.
/// kCakeSpecialized: the per-route shrink + expand with compile-time H and R (spec §7).
enum class CudaPath : uint8_t {
  kCakePerRoute,
  kCakeGrouped,
  kPortable,
  kCakeSpecialized
};

class CudaPlan {
 public:
  /// Sequence-specific operands, filled by prepare (pointers into bound tensors and workspaces).
  struct Launch;

  explicit CudaPlan(int device_index);
  ~CudaPlan();
  CudaPlan(const CudaPlan&) = delete;
  CudaPlan& operator=(const CudaPlan&) = delete;

  /// The sequence to run; set once at prepare (takes ownership).
  void set_launch(std::unique_ptr<Launch> launch);
  /// spec §8: inside an outer capture the kernels are enqueued on `stream`; otherwise the first
  /// call captures them into a private graph (on a side stream) and every call replays it on
  /// `stream`, which must stay the stream of the first replay. No allocation, no host sync
  /// (except the first capture).
  void run(Stream stream);
  /// Synchronises the owner stream and destroys the graph; a later run() recaptures.
  void close();
  /// Enqueues the launch sequence on `stream` (no graph); used by run().
  void enqueue(Stream stream) const;
  /// The operands set at prepare (nullptr before set_launch); benches replay single stages.
  const Launch* launch() const { return launch_.get(); }

 private:
  void destroy_graph() noexcept;

  int device_index_;
  std::unique_ptr<Launch> launch_;
  std::recursive_mutex mutex_;
  void* graph_ = nullptr;        // cudaGraph_t
  void* graph_exec_ = nullptr;   // cudaGraphExec_t
  void* side_stream_ = nullptr;  // cudaStream_t used for capture
  Stream owner_ = nullptr;       // stream of the first replay; meaningful while graph_exec_ is set
};

}  // namespace bgmv
}  // namespace cakemoe
