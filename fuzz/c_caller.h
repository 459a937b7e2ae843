/* C helpers of the c_api fuzz target (fuzz/c_caller.c): dtypes passed as a C caller would. */
#ifndef MOE_FUZZ_C_CALLER_H_
#define MOE_FUZZ_C_CALLER_H_

#include "moe/api/moe_c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* moe_weights_random with `storage` converted to moe_dtype_t in C. */
moe_status_t c_caller_weights_random(const moe_layer_shape_t* shape, int32_t storage, uint64_t seed,
                                     moe_weights_t** out);
/* buffers->dtype = (moe_dtype_t)dtype, in C. */
void c_caller_set_dtype(moe_weight_buffers_t* buffers, int32_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* MOE_FUZZ_C_CALLER_H_ */
