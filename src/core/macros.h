// Portability macros shared by host and device code.
#pragma once

#if defined(__CUDACC__)
#define CAKEMOE_HD __host__ __device__ __forceinline__
#define CAKEMOE_DEVICE __device__ __forceinline__
#else
#define CAKEMOE_HD inline
#define CAKEMOE_DEVICE inline
#endif
