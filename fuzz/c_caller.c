/* What a C caller may do and C++ may not: put any int into a moe_dtype_t (C converts an int to an enum type
 * with defined behaviour; C++ does not). The c_api fuzz target passes its out-of-range dtypes through here.
 */
#include "fuzz/c_caller.h"

moe_status_t c_caller_weights_random(const moe_layer_shape_t* shape, int32_t storage, uint64_t seed,
                                     moe_weights_t** out) {
  return moe_weights_random(shape, (moe_dtype_t)storage, seed, out);
}

void c_caller_set_dtype(moe_weight_buffers_t* buffers, int32_t dtype) {
  buffers->dtype = (moe_dtype_t)dtype;
}
