// MOE_HD marks a function that host and device code both call: `__host__ __device__` under nvcc, nothing
// elsewhere. The rules that the CPU and the GPU must apply bit for bit (router/rules/) are written once with
// it.
#pragma once

#if defined(__CUDACC__)
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif
