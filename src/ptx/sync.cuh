// Warp-role synchronisation: named barriers, register reallocation between warpgroups, and the
// programmatic dependent launch controls (griddepcontrol).
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace cakemoe {
namespace ptx {

/// bar.sync on barrier `id` (1..15; 0 is __syncthreads) for `threads` threads (multiple of 32).
CAKEMOE_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// setmaxnreg (sm_90a): the warpgroup gives registers back / takes them.
template <int kRegisters>
CAKEMOE_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
CAKEMOE_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

/// Waits for the grids this one depends on (PDL) to complete and flush; no-op without PDL.
CAKEMOE_DEVICE void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/// Lets the dependent grid launch (its CTAs still wait in griddep_wait for this grid to end).
CAKEMOE_DEVICE void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// A programmatic dependent's first step: wait for the kernel before it, then let the next kernel
/// launch (its CTAs wait in their own griddep_wait). Called before any global memory access.
CAKEMOE_DEVICE void griddep_enter() {
  griddep_wait();
  griddep_launch_dependents();
}

}  // namespace ptx
}  // namespace cakemoe
