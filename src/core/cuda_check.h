// CUDA return-code checking: every runtime call goes through CAKEMOE_CUDA_CHECK.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cakemoe/errors.h"

namespace cakemoe {
namespace core {

inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    // NOTE: a failing call also leaves its error as the thread's last error; a non-sticky one
    // would then be reported again by the next unrelated cudaGetLastError() (a later launch).
    cudaGetLastError();
    throw CudaError(call, std::string(cudaGetErrorName(status)) + " (" +
                              cudaGetErrorString(status) + ") at " + file + ":" +
                              std::to_string(line));
  }
}

}  // namespace core
}  // namespace cakemoe

#define CAKEMOE_CUDA_CHECK(call) ::cakemoe::core::cuda_check((call), #call, __FILE__, __LINE__)
