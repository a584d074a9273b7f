// A small fork-join parallel_for for the CPU reference engine (no thread pool state to manage).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

namespace cakemoe {
namespace core {

/// Worker count: CAKEMOE_NUM_THREADS if set, else the hardware concurrency.
inline int num_threads() {
  if (const char* env = std::getenv("CAKEMOE_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

/// Calls body(i) for i in [0, n), split into contiguous chunks over the workers. Each index is
/// handled by exactly one thread, so bodies that write disjoint outputs need no synchronisation.
/// The first exception thrown by a body is rethrown on the caller's thread.
template <typename Body>
void parallel_for(int64_t n, Body&& body, int64_t min_chunk = 1) {
  if (n <= 0) return;
  const int64_t workers =
      std::max<int64_t>(1, std::min<int64_t>(num_threads(), (n + min_chunk - 1) / min_chunk));
  if (workers == 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        // Interleaved static schedule: balances per-index cost that grows with the index.
        for (int64_t i = w; i < n; i += workers) body(i);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace core
}  // namespace cakemoe
