/* The C API of the MoE runtime: weights, a layer, forward passes, stats and provenance.
 *
 * A C (C99) interface over the C++ library, for embedding the layer in another inference stack or binding
 * it from another language. Link moe::moe_c (CMake) or `pkg-config --libs moe` (which lists the C++
 * runtime too).
 *
 * Conventions for every function of this header:
 *   - Errors: every call returns a moe_status_t. On anything but MOE_OK, the calling thread's last-error
 *     message (moe_last_error()) says what was wrong in words, and the call's outputs are left as
 *     documented for that call (output handles are set to NULL; output buffers are unchanged unless
 *     stated otherwise). No C++ exception ever crosses this interface.
 *   - Ownership: a handle returned through an `out` pointer belongs to the caller, who frees it with the
 *     matching *_destroy function (which accepts NULL). Input buffers stay owned by the caller and are
 *     read during the call only, unless a function says it keeps them.
 *   - Threading: functions on different handles may run concurrently. A moe_weights_t is immutable and
 *     may be shared by any number of layers and threads. A moe_layer_t and a moe_routing_state_t serve
 *     one thread at a time (the layer's forward is not reentrant; the layer runs its own worker threads
 *     inside a call).
 *   - Shapes are row-major and contiguous. Sizes are counts of elements, not bytes, unless named *_bytes.
 *
 * What a forward pass computes (docs/routing.md, moe/layer/moe_layer.h):
 *   y[t] = sum_{j < k, pair (t, j) kept} w[t][j] * FFN_{e(t,j)}(x[t])   (+ the shared expert, if any)
 * The "deterministic" preset makes the bits of y[t] independent of the other requests in the batch, of
 * the row order, of the batch size and of the thread count.
 */
#ifndef MOE_API_MOE_C_H_
#define MOE_API_MOE_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status and errors --------------------------------------------------------------------------------- */

typedef enum {
  MOE_OK = 0,
  MOE_INVALID_ARGUMENT = 1, /* a null pointer, a wrong shape or name, a NaN row, a config that does not fit */
  MOE_IO_ERROR = 2,         /* a file could not be opened, read, mapped or written */
  MOE_RUNTIME_ERROR = 3,    /* anything else the library reported */
  MOE_OUT_OF_MEMORY = 4,    /* an allocation failed */
  MOE_BUFFER_TOO_SMALL = 5  /* a caller buffer is smaller than needed; the required size was written */
} moe_status_t;

/* The calling thread's message for its last failed call ("" if none failed yet). The pointer stays valid
 * until the thread's next call into this API. Never NULL. */
const char* moe_last_error(void);

/* A static name for a status, e.g. "MOE_INVALID_ARGUMENT". Never NULL. */
const char* moe_status_string(moe_status_t status);

/* The library version, e.g. "0.1.0". Static, never NULL. */
const char* moe_version(void);

/* What a layer preset is, in one sentence: its scope, priority, overflow, capacity factor and kernels (read
 * from the preset itself), then what it guarantees; e.g. for "deterministic": "prefix scope (lookahead 16),
 * request priority, drop, capacity factor 1.25, invariant kernels: a request's output is bitwise independent
 * of ...". Static (valid for the life of the process). NULL for NULL or an unknown preset (moe_last_error
 * names the known ones). */
const char* moe_preset_description(const char* preset);

/* ---- Weights ------------------------------------------------------------------------------------------- */

/* An immutable set of weights of one MoE layer (router gate, experts, optional shared expert). */
typedef struct moe_weights moe_weights_t;

/* Storage type of the expert matrices. F32 and BF16: computation is fp32 (bf16 widened exactly) or bf16
 * (moe_layer_config_set_compute). The quantized types are kept as a checkpoint stores them and run by the
 * quantized kernels (docs/runtime.md, kernels/quant_formats.h): ggml's Q8_0, Q4_K, Q6_K and MXFP4 blocks, and
 * FP8 e4m3 with 2-D block scales (DeepSeek-V3's safetensors layout). */
typedef enum {
  MOE_DTYPE_F32 = 0,
  MOE_DTYPE_BF16 = 1,
  MOE_DTYPE_Q8_0 = 3,
  MOE_DTYPE_Q4_K = 4,
  MOE_DTYPE_Q6_K = 5,
  MOE_DTYPE_MXFP4 = 6,
  MOE_DTYPE_FP8 = 7
} moe_dtype_t;

/* The dimensions of one MoE layer (moe/io/layer_weights.h, io::LayerShape).
 *   hidden              d_model
 *   expert_ff           intermediate size of each routed expert
 *   num_experts         routed experts E
 *   num_shared_experts  0 (none) or 1 (Qwen2-MoE shared_expert; DeepSeek-V3's fused shared experts)
 *   shared_ff           intermediate size of the shared expert (ignored without one)
 *   shared_expert_gate  1: the shared output is scaled by sigmoid(shared_gate . x) (Qwen2-MoE)
 *   score_bias          1: a per-expert selection bias (DeepSeek-V3 e_score_correction_bias) */
typedef struct {
  int64_t hidden;
  int64_t expert_ff;
  int32_t num_experts;
  int32_t num_shared_experts;
  int64_t shared_ff;
  int32_t shared_expert_gate;
  int32_t score_bias;
} moe_layer_shape_t;

/* Loads layer `layer_index` of a safetensors checkpoint with the Hugging Face names of `architecture`
 * ("mixtral", "qwen2-moe", "deepseek-v3", "olmoe"). `path` is a .safetensors file, a *.safetensors.index.json
 * or a directory holding either. Every tensor must have exactly the shape `shape` implies.
 *   storage: MOE_DTYPE_F32 or MOE_DTYPE_BF16 converts (or dequantizes exactly) the expert matrices to that
 *   dtype; -1 keeps the file's (an FP8 or MXFP4 checkpoint as stored); MOE_DTYPE_FP8 / MOE_DTYPE_MXFP4 ask
 * for the file's own quantized format (an error naming both if it holds another). Tensors already in the
 * storage dtype are not copied: they stay mapped from the file, which must not be modified or truncated while
 * the weights (or a layer using them) live. Errors: MOE_INVALID_ARGUMENT (null pointer, unknown architecture,
 * missing tensor, wrong shape or dtype: the message names the tensor and the file); MOE_IO_ERROR (the file
 * cannot be opened or mapped). */
moe_status_t moe_weights_load(const char* path, const char* architecture, int32_t layer_index,
                              const moe_layer_shape_t* shape, int32_t storage, moe_weights_t** out);

/* Loads MoE layer `layer_index` of a Hugging Face checkpoint directory (config.json + model.safetensors or a
 * sharded index): no shape arguments, they come from config.json (model_type mixtral, qwen2_moe, qwen3_moe,
 * olmoe, deepseek_v2, deepseek_v3, glm4_moe, gpt_oss, llama4 or llama4_text; moe/io/pretrained.h lists every
 * key) and are checked against the tensors. `dir` may also be the path of config.json, or a GGUF file (a
 * .gguf name or the GGUF magic; single, or any shard of a split one: general.architecture llama, qwen2moe,
 * qwen3moe, olmoe, deepseek2, glm4moe, gpt-oss or llama4 with llama.cpp's tensor names and keys,
 * moe/io/gguf_config.h). storage as for moe_weights_load (-1: the file's dtype; FP8, MXFP4 and GGUF's Q8_0,
 * Q4_K, Q6_K checkpoints as stored, run by the quantized kernels).
 * Errors: MOE_INVALID_ARGUMENT (null pointer, malformed or unsupported config.json or GGUF file - an
 * unsupported key value or tensor type is named - a config that does not match the tensors - the message
 * names the key, its value and the tensor - layer_index outside [0, num_hidden_layers) or a dense layer: the
 * message lists the MoE layers); MOE_IO_ERROR (config.json or the weights cannot be read); MOE_OUT_OF_MEMORY
 * (the converted weights would not fit the memory available: the message gives both sizes). */
moe_status_t moe_weights_load_pretrained(const char* dir, int32_t layer_index, int32_t storage,
                                         moe_weights_t** out);

/* Seeded random weights (uniform like nn.Linear's init): the same bits for the same (shape, storage, seed) on
 * every machine. A quantized storage quantizes the fp32 draws (its block must divide the matrices' rows: 32
 * for Q8_0 / MXFP4, 256 for Q4_K / Q6_K). Errors: MOE_INVALID_ARGUMENT for a null pointer, an invalid shape
 * or a shape the format does not divide. */
moe_status_t moe_weights_random(const moe_layer_shape_t* shape, moe_dtype_t storage, uint64_t seed,
                                moe_weights_t** out);

/* Caller-provided weight buffers, all row-major, nn.Linear layout [out_features, in_features].
 *   dtype               dtype of the expert and shared-expert matrices below
 *                       (MOE_DTYPE_F32: float; MOE_DTYPE_BF16: uint16_t bit patterns)
 *   router_gate         [num_experts, hidden] fp32 (required)
 *   score_bias          [num_experts] fp32, required iff shape.score_bias, else NULL
 *   expert_gate_proj    num_experts pointers, each [expert_ff, hidden]   (Mixtral w1)
 *   expert_up_proj      num_experts pointers, each [expert_ff, hidden]   (Mixtral w3)
 *   expert_down_proj    num_experts pointers, each [hidden, expert_ff]   (Mixtral w2)
 *   shared_gate_proj    [shared_ff, hidden]  } required iff shape.num_shared_experts > 0,
 *   shared_up_proj      [shared_ff, hidden]  } else NULL
 *   shared_down_proj    [hidden, shared_ff]  }
 *   shared_expert_gate  [1, hidden] fp32, required iff shape.shared_expert_gate, else NULL */
typedef struct {
  moe_dtype_t dtype;
  const float* router_gate;
  const float* score_bias;
  const void* const* expert_gate_proj;
  const void* const* expert_up_proj;
  const void* const* expert_down_proj;
  const void* shared_gate_proj;
  const void* shared_up_proj;
  const void* shared_down_proj;
  const float* shared_expert_gate;
} moe_weight_buffers_t;

/* Weights from caller buffers. The buffers are COPIED during the call (memory to memory; no file is
 * involved): the caller may free or change them as soon as it returns. Errors: MOE_INVALID_ARGUMENT for a
 * null pointer where a buffer is required, a buffer given where the shape has no such tensor, or an invalid
 * shape; MOE_OUT_OF_MEMORY if the copy cannot be allocated. */
moe_status_t moe_weights_from_buffers(const moe_layer_shape_t* shape, const moe_weight_buffers_t* buffers,
                                      moe_weights_t** out);

/* The shape, storage dtype and content hash (XXH3-64 over every tensor, independent of the file or naming the
 * weights came from) of `weights`. Errors: MOE_INVALID_ARGUMENT for a null pointer. */
moe_status_t moe_weights_shape(const moe_weights_t* weights, moe_layer_shape_t* shape);
moe_status_t moe_weights_storage(const moe_weights_t* weights, moe_dtype_t* storage);
moe_status_t moe_weights_hash(const moe_weights_t* weights, uint64_t* hash);

/* Releases the caller's reference. Layers created from these weights keep their own reference, so the weights
 * may be destroyed right after creating the layers. NULL is ignored. */
void moe_weights_destroy(moe_weights_t* weights);

/* ---- Layer --------------------------------------------------------------------------------------------- */

typedef struct moe_layer moe_layer_t;

/* How a layer routes and computes: an opaque configuration, built with moe_layer_config_create() and
 * changed with the setters below (leveldb's C API style), so that new options never change a struct layout.
 * An option that was never set takes the preset's or the router's value. Each setter checks its value at once
 * (an unknown name, a value out of range: MOE_INVALID_ARGUMENT naming it, the config unchanged); what depends
 * on the weights (top_k against num_experts, groups that divide it) is checked by moe_layer_create.
 * A config is not tied to any layer: it may be reused for several layers and destroyed right after creating
 * them. One thread at a time per config. */
typedef struct moe_layer_config moe_layer_config_t;

/* A new config: the "deterministic" preset with the "mixtral" router. Errors: MOE_INVALID_ARGUMENT for a
 * null `out`, MOE_OUT_OF_MEMORY. */
moe_status_t moe_layer_config_create(moe_layer_config_t** out);
/* NULL is ignored. */
void moe_layer_config_destroy(moe_layer_config_t* config);

/* preset: "deterministic" (stable dispatch and invariant kernels) or "greedy" (what production engines do);
 * moe_preset_description says what each one sets and guarantees. Setting the preset keeps the options set
 * explicitly (they apply on top of it). */
moe_status_t moe_layer_config_set_preset(moe_layer_config_t* config, const char* preset);
/* router: the routing rules of an architecture: "mixtral" (softmax, top-2, renormalised), "qwen2-moe"
 * (softmax, top-4, not renormalised), "deepseek-v3" (sigmoid + bias, groups, scaling 2.5), "olmoe", or the
 * router preset "switch". num_experts always comes from the weights. */
moe_status_t moe_layer_config_set_router(moe_layer_config_t* config, const char* router);
/* top_k: 1..num_experts (default: the router's, capped at num_experts). */
moe_status_t moe_layer_config_set_top_k(moe_layer_config_t* config, int32_t top_k);
/* renormalize: 0 or 1, renormalise the k weights to sum 1 (default: the router's). */
moe_status_t moe_layer_config_set_renormalize(moe_layer_config_t* config, int32_t renormalize);
/* Group-limited choice (DeepSeek-V3): num_groups >= 1 must divide num_experts; topk_groups in
 * [1, num_groups]. */
moe_status_t moe_layer_config_set_groups(moe_layer_config_t* config, int32_t num_groups, int32_t topk_groups);
/* capacity_factor: finite, > 0 and at most 1e6 (DispatchPolicy::kMaxCapacityFactor; default 1.25). */
moe_status_t moe_layer_config_set_capacity_factor(moe_layer_config_t* config, double capacity_factor);
/* min_capacity: >= 0, the least number of slots any pool offers (default 0). */
moe_status_t moe_layer_config_set_min_capacity(moe_layer_config_t* config, int32_t min_capacity);
/* scope: "batch" | "request" | "causal" | "sequence" | "prefix" | "none" (none = dropless)
 * (docs/routing.md). The "deterministic" preset is "prefix": it needs each request admitted (or restored)
 * into a moe_routing_state_t. */
moe_status_t moe_layer_config_set_scope(moe_layer_config_t* config, const char* scope);
/* lookahead: prefix scope's W >= 0, the positions past a prompt row its budget covers (default 16). */
moe_status_t moe_layer_config_set_lookahead(moe_layer_config_t* config, int64_t lookahead);
/* priority: "arrival" | "request" | "score" | "random". */
moe_status_t moe_layer_config_set_priority(moe_layer_config_t* config, const char* priority);
/* overflow: "drop" | "reroute"; reroute_depth >= 1 ranks beyond top_k an overflowing pair may try
 * (default 1). */
moe_status_t moe_layer_config_set_overflow(moe_layer_config_t* config, const char* overflow);
moe_status_t moe_layer_config_set_reroute_depth(moe_layer_config_t* config, int32_t reroute_depth);
/* kernel: "invariant" | "fast", for the experts and the router gate. */
moe_status_t moe_layer_config_set_kernel(moe_layer_config_t* config, const char* kernel);
/* compute: "fp32" (default) | "bf16", the arithmetic of the expert and shared-expert FFNs. bf16: every GEMM
 * input rounded to bf16 (round to nearest even), bf16 weights (fp32 weights are rounded once when the layer
 * is created), fp32 accumulation (vdpbf16ps where the CPU has it, else an exact emulation); the router and
 * shared-expert gates stay fp32, so routing does not change. The "invariant" kernel keeps its batch
 * invariance in bf16 (docs/determinism.md). The CUDA layer refuses bf16 (moe_layer_create:
 * MOE_INVALID_ARGUMENT). */
moe_status_t moe_layer_config_set_compute(moe_layer_config_t* config, const char* compute);
/* storage: the type moe_layer_create_pretrained stores the expert matrices in (default: the file's, quantized
 * files as stored; MOE_DTYPE_F32 / MOE_DTYPE_BF16 dequantize them exactly). Ignored by moe_layer_create,
 * whose weights are already stored. */
moe_status_t moe_layer_config_set_storage(moe_layer_config_t* config, moe_dtype_t storage);
/* num_threads: >= 1, the threads used inside a forward pass (default 1: the calling thread). */
moe_status_t moe_layer_config_set_num_threads(moe_layer_config_t* config, int32_t num_threads);
/* max_tokens: >= 1. The workspace is sized for batches of this many rows at creation (default 256); a larger
 * batch grows it once. */
moe_status_t moe_layer_config_set_max_tokens(moe_layer_config_t* config, int32_t max_tokens);
/* device: "cpu" (default); "cuda" or "cuda:N": the same layer on CUDA device N (builds with CUDA; host arrays
 * in and out, one synchronisation per forward; docs/cuda.md). No usable device is reported by
 * moe_layer_create (MOE_RUNTIME_ERROR naming the reason); a build without CUDA rejects "cuda" here.
 * num_threads is then ignored. */
moe_status_t moe_layer_config_set_device(moe_layer_config_t* config, const char* device);

/* A layer over `weights` (the layer keeps its own reference to them). config NULL: the defaults of
 * moe_layer_config_create. Errors: MOE_INVALID_ARGUMENT for a config that does not fit the weights (top_k
 * above num_experts, groups that do not divide it, ...); MOE_RUNTIME_ERROR for a CUDA device that is not
 * usable. */
moe_status_t moe_layer_create(const moe_weights_t* weights, const moe_layer_config_t* config,
                              moe_layer_t** out);

/* MoE layer `layer_index` of a Hugging Face checkpoint directory or a GGUF file (moe_weights_load_pretrained,
 * the file's storage dtype) with the router and expert semantics config.json (the GGUF metadata) describes
 * (every routing key of its family, gpt-oss's clamped SwiGLU and biases, Llama 4's weight on the expert
 * input), top_k and renormalisation overridden only if `config` sets them; dispatch, kernels and device from
 * `config` (NULL: the defaults). Errors: those of moe_weights_load_pretrained and moe_layer_create. */
moe_status_t moe_layer_create_pretrained(const char* dir, int32_t layer_index,
                                         const moe_layer_config_t* config, moe_layer_t** out);

/* ---- Expert parallelism (docs/expert-parallel.md) -------------------------------------------------------
 * With an expert-parallel config, moe_layer_create and moe_layer_create_pretrained make this process one rank
 * of a layer whose routed experts are split over the ranks; every rank then calls them, and
 * moe_layer_forward, at the same time (collective calls: each rank passes its own rows, num_tokens may be 0;
 * the outputs are bitwise those of one process on the ranks' rows concatenated in rank order, with the
 * "deterministic" preset). moe_layer_create_pretrained reads on each rank only the experts it holds (plus the
 * router gate and the shared expert); moe_layer_create takes the whole layer or this rank's part. The layer
 * runs on the CPU (device "cpu"). backend   "mpi" (MPI_COMM_WORLD: run under mpirun; MPI is initialised if
 * the program has not done it), "single" (one process), NULL or "" (no expert parallelism: the default)
 *   planning  "global" (every rank plans the whole batch; a routing state holds every request and every rank
 *             admits every request) or "home" (every rank plans its own rows: each request's rows of a call
 * on one rank, its routing state on that rank - admit it there); NULL = "global" Errors: MOE_INVALID_ARGUMENT
 * for an unknown backend ("mpi" in a build without MPI) or planning. */
moe_status_t moe_layer_config_set_expert_parallel(moe_layer_config_t* config, const char* backend,
                                                  const char* planning);
/* The placement of the experts on the ranks, as physical slots (DeepSeek EPLB's phy2log, moe_eplb_rebalance):
 * slot s holds expert physical_to_logical[s] and lives on rank s / (num_slots / world size); an expert in
 * several slots has replicas. NULL and 0: contiguous blocks (the default). Checked when the layer is created
 * (num_slots a multiple of the world size, every expert in some slot). */
moe_status_t moe_layer_config_set_expert_placement(moe_layer_config_t* config,
                                                   const int32_t* physical_to_logical, int64_t num_slots);
/* DeepSeek's expert-parallelism load balancer (moe/parallel/eplb.h; equal to the published eplb.py): from the
 * per-expert loads load[0 .. num_experts), the expert of each of num_replicas slots (physical_to_logical,
 * room for num_replicas values) on num_gpus ranks of num_nodes nodes - hierarchical (groups packed onto
 * nodes) when num_nodes divides num_groups, else global. Errors: MOE_INVALID_ARGUMENT naming what does not
 * fit. */
moe_status_t moe_eplb_rebalance(const float* load, int32_t num_experts, int32_t num_replicas,
                                int32_t num_groups, int32_t num_nodes, int32_t num_gpus,
                                int32_t* physical_to_logical);
/* This process's rank and the world size of an expert-parallel layer (0 and 0 for another layer), and whether
 * it plans its own rows (planning "home" with a policy that allows it). Any output may be NULL. */
moe_status_t moe_layer_expert_parallel(const moe_layer_t* layer, int32_t* rank, int32_t* world_size,
                                       int32_t* plans_locally);

/* NULL is ignored. Must not be called while another thread is inside a call on the same layer. */
void moe_layer_destroy(moe_layer_t* layer);

/* The layer's hidden size, experts and top-k. Errors: MOE_INVALID_ARGUMENT for a null pointer. */
moe_status_t moe_layer_dims(const moe_layer_t* layer, int64_t* hidden, int32_t* num_experts, int32_t* top_k);

/* Per-request routing state of one layer: what scopes "prefix", "sequence" and "causal" carry across forward
 * passes, so that a request's routing depends only on the request itself however its prompt is chunked,
 * cached, preempted or speculated and whoever shares its batches. The request lifecycle of a serving engine:
 *   moe_routing_state_admit(state, id, prompt_length)   before the request's first forward pass, or
 *   moe_routing_state_restore(state, id, prompt_length, segments...)
 *                                                        when its first P positions come from a prefix cache
 *   moe_layer_forward(..., state)                        prompt chunks of any size, then decode rows (several
 *                                                        at once when speculating)
 *   moe_routing_state_rollback(state, id, position)      rejected draft tokens (or a partial recompute)
 *   moe_routing_state_segment(state, id, begin, end...)  the routing of positions [begin, end), to keep in
 *                                                        the prefix cache beside their KV (a recording state)
 *   moe_routing_state_release(state, id)                 when the request finishes (or is preempted)
 * Scopes "prefix" (the deterministic preset) and "sequence" need every request admitted or restored; "causal"
 * creates a request at its first forward pass. Other scopes ignore the state. A prefix cache hashes
 * moe_prefix_cache_salt into the key of each block (docs/routing.md, "Prefix caching"). One state per layer
 * (a model keeps one per MoE layer), used by one thread at a time. */
typedef struct moe_routing_state moe_routing_state_t;

/* A new, empty state for `layer`'s shape (num_experts, top_k): forwarding it through a layer of another
 * shape is MOE_INVALID_ARGUMENT. The caller owns it (moe_routing_state_destroy). Errors:
 * MOE_INVALID_ARGUMENT for a null pointer. */
moe_status_t moe_routing_state_create(const moe_layer_t* layer, moe_routing_state_t** out);
/* The same, recording: it keeps the routing of every position of its live requests, which
 * moe_routing_state_segment reads and rollbacks into prompt rows need. */
moe_status_t moe_routing_state_create_recording(const moe_layer_t* layer, moe_routing_state_t** out);
/* The routing of positions [begin, end) of a live request of a recording state, as a self-describing byte
 * string (RoutingSegment's byte form) written to buf[0 .. *size). buf may be NULL with buf_len 0 to ask the
 * size. Errors (nothing written): MOE_INVALID_ARGUMENT for a null state or size, a state that does not
 * record, a request it does not hold, or [begin, end) outside the request's planned positions;
 * MOE_BUFFER_TOO_SMALL (with *size set) when buf_len < *size. */
moe_status_t moe_routing_state_segment(const moe_routing_state_t* state, uint64_t request_id, uint32_t begin,
                                       uint32_t end, uint8_t* buf, int64_t buf_len, int64_t* size);
/* Admits a request whose positions [0, P) come from a prefix cache: segments[i] (segment_sizes[i] bytes, from
 * moe_routing_state_segment) are the cached segments of those positions in order, from 0 (num_segments 0:
 * like moe_routing_state_admit). Errors (the state unchanged): MOE_INVALID_ARGUMENT for a null state, a
 * malformed segment, a request the state holds, prompt_length 0, segments that are not contiguous from 0, of
 * another layer shape or rule, or planned for a prompt length whose salt differs from this one's (the
 * message names which). */
moe_status_t moe_routing_state_restore(moe_routing_state_t* state, uint64_t request_id,
                                       uint32_t prompt_length, const uint8_t* const* segments,
                                       const int64_t* segment_sizes, int64_t num_segments);
/* Rolls a request back to `position` (its positions >= position are forgotten). Errors (the state
 * unchanged): MOE_INVALID_ARGUMENT for a null state, a request it does not hold, a position past the
 * request's next one or below its cache boundary, or forgotten prompt rows in a state that does not record.
 */
moe_status_t moe_routing_state_rollback(moe_routing_state_t* state, uint64_t request_id, uint32_t position);
/* The prefix cache's key extension for the block of a request (prompt length `prompt_length`) that ends at
 * position prefix_end under the layer's dispatch rule: blocks of two requests with the same tokens route
 * alike iff their salts are equal (0: any request with these tokens; else only requests of this prompt
 * length). Errors: MOE_INVALID_ARGUMENT for a null pointer. */
moe_status_t moe_prefix_cache_salt(const moe_layer_t* layer, uint32_t prefix_end, uint32_t prompt_length,
                                   uint64_t* salt);
/* Admits a request that will send `prompt_length` prompt tokens (positions 0 .. prompt_length - 1, in
 * chunks of any size) and then decode. Errors (the state unchanged): MOE_INVALID_ARGUMENT for a null state,
 * prompt_length 0, or a request the state already holds. */
moe_status_t moe_routing_state_admit(moe_routing_state_t* state, uint64_t request_id, uint32_t prompt_length);
/* Conversations (docs/routing.md, "Conversations"): a turn whose prompt is the earlier turns' prompts and
 * answers and a new message, described by its turn ends turn_ends[0 .. num_turn_ends): turn 1's prompt ends
 * at turn_ends[0], its answer at turn_ends[1], turn 2's message at turn_ends[2], ..., this turn's prompt at
 * the last (odd count, strictly increasing; {prompt_length} is a single turn). Admitted so, a turn routes the
 * earlier turns' positions exactly as they were routed in their own turns, and a prefix cache may serve them
 * all from the earlier turns' blocks. The _turns forms of admit, restore and the salt; errors as theirs, and
 * MOE_INVALID_ARGUMENT for a null or invalid turn_ends (the message names the problem). */
moe_status_t moe_routing_state_admit_turns(moe_routing_state_t* state, uint64_t request_id,
                                           const uint32_t* turn_ends, int64_t num_turn_ends);
moe_status_t moe_routing_state_restore_turns(moe_routing_state_t* state, uint64_t request_id,
                                             const uint32_t* turn_ends, int64_t num_turn_ends,
                                             const uint8_t* const* segments, const int64_t* segment_sizes,
                                             int64_t num_segments);
moe_status_t moe_prefix_cache_salt_turns(const moe_layer_t* layer, uint32_t prefix_end,
                                         const uint32_t* turn_ends, int64_t num_turn_ends, uint64_t* salt);
/* Forgets a finished request. Errors (the state unchanged): MOE_INVALID_ARGUMENT for a null state or a
 * request the state does not hold. */
moe_status_t moe_routing_state_release(moe_routing_state_t* state, uint64_t request_id);
/* The number of requests the state holds. Errors: MOE_INVALID_ARGUMENT for a null pointer. */
moe_status_t moe_routing_state_num_requests(const moe_routing_state_t* state, int64_t* out);
/* NULL is ignored. */
void moe_routing_state_destroy(moe_routing_state_t* state);

/* One forward pass over num_tokens rows.
 *   x            [num_tokens, hidden] fp32, caller-owned, read only
 *   hidden       the row length of x and y; must equal the layer's hidden size
 *   request_ids  [num_tokens] the request each row belongs to
 *   positions    [num_tokens] each row's index within its request; (request_id, position) pairs must be
 *                distinct within a batch (and, under prefix, sequence and causal scopes with a state,
 *                continue each request's positions where its previous forward pass left them)
 *   y            [num_tokens, hidden] fp32, caller-owned, overwritten; must not overlap x
 *   state        the routing state to read and advance (prefix, sequence and causal scopes), or NULL: then
 *                every request starts at position 0 and, under prefix and sequence scopes, its rows in this
 *                call are its whole prompt
 * num_tokens may be 0 (nothing is written; pointers may then be NULL).
 * Errors: MOE_INVALID_ARGUMENT for a null pointer with rows, hidden that does not match the layer, negative
 * num_tokens, a row of x whose router logits are all non-finite (NaN/inf in x; the message names the row),
 * duplicate (request_id, position) pairs, positions that skip or go back, a request not admitted (prefix and
 * sequence scopes), or a state made for a layer of another shape. On an error y and state are
 * unchanged. Threading: one thread at a time per layer. Memory: allocation-free after the first call, for
 * batches up to the largest seen (or max_tokens). */
moe_status_t moe_layer_forward(moe_layer_t* layer, const float* x, int64_t num_tokens, int64_t hidden,
                               const uint64_t* request_ids, const uint32_t* positions, float* y,
                               moe_routing_state_t* state);

/* The routing outcome of the last successful forward pass (all zero before the first). */
typedef struct {
  int64_t num_tokens;
  int64_t num_kept;                 /* pairs placed on their chosen expert */
  int64_t num_rerouted;             /* pairs placed on a lower-ranked expert (overflow "reroute") */
  int64_t num_dropped;              /* pairs that got no expert */
  int64_t num_tokens_fully_dropped; /* tokens none of whose k pairs got an expert */
} moe_stats_t;

/* Writes the last forward's stats into *stats (if not NULL) and its per-expert load (slots used) into
 * expert_load[0 .. num_experts) (if not NULL; expert_load_len must then be >= num_experts, else
 * MOE_BUFFER_TOO_SMALL and nothing is written). */
moe_status_t moe_layer_stats(const moe_layer_t* layer, moe_stats_t* stats, int32_t* expert_load,
                             int64_t expert_load_len);

/* The plan of the last forward pass, per (token, choice) pair p = t * top_k + j
 * (num_pairs = num_tokens * top_k):
 *   pair_expert  the pair's expert (-1 if dropped)
 *   pair_slot    its slot within that expert (-1 if dropped)
 *   pair_weight  its combine weight (0 if dropped)
 *   pair_status  0 kept, 1 rerouted, 2 dropped
 * Any output may be NULL. Each non-NULL output must hold `capacity` >= num_pairs elements, else
 * MOE_BUFFER_TOO_SMALL with *num_pairs set and nothing written. num_pairs (required) receives the count. */
moe_status_t moe_layer_last_plan(const moe_layer_t* layer, int32_t* pair_expert, int32_t* pair_slot,
                                 float* pair_weight, uint8_t* pair_status, int64_t capacity,
                                 int64_t* num_pairs);

/* The provenance of this layer's results as one JSON object (config and weights hashes, version, build,
 * kernel, dispatch, device, threads), NUL-terminated.
 * Required-size semantics: *required (if not NULL) receives strlen(json) + 1. With buffer == NULL and
 * buffer_size == 0 the call only reports the size (MOE_OK). If buffer_size is smaller than the required
 * size, nothing is written and MOE_BUFFER_TOO_SMALL is returned. */
moe_status_t moe_layer_fingerprint(const moe_layer_t* layer, char* buffer, size_t buffer_size,
                                   size_t* required);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOE_API_MOE_C_H_ */
