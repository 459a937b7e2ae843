// libmoe.so's own translation unit. The library is libmoe_api_c.a linked whole (with what it needs from the
// other static libraries) and exports moe_c.h's functions only (moe_c.map); CMake wants one source of its
// own.
#include "moe/api/moe_c.h"
