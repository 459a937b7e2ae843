#!/usr/bin/env bash
# moe-sim inspect on every family checkpoint the fixture wrote (exit 0, the family, its MoE layers and what loads),
# on a config this project refuses (exit 1 and the reason), and on DeepSeek-V3's published config.json without
# its weights (the memory of one real-shape layer: 11.3 GB in FP8, 22.6 GB in bf16, shared expert included).
# Usage: sim_inspect_test.sh MOE_SIM FAMILY_DIR
set -euo pipefail
sim="$1"
families="$2"
fail() { echo "sim_inspect_test: FAILED: $*" >&2; exit 1; }
while read -r name model_type quant layer tokens hidden tolerance; do
  out=$("$sim" inspect "$families/$name") || fail "$name: exit status $?"
  grep -q "^family      $model_type " <<< "$out" || fail "$name: no family line for $model_type: $out"
  grep -q "^layers .* MoE " <<< "$out" || fail "$name: no MoE layer list"
  grep -q "^supported   every MoE layer" <<< "$out" || fail "$name: no supported line"
  grep -q "^memory      per MoE layer" <<< "$out" || fail "$name: no memory line"
done < "$families/families.txt"
out=$("$sim" inspect "$families/deepseek_v2_bf16")
grep -q "MoE 1-3 (3), dense MLP 1" <<< "$out" || fail "deepseek_v2 layers: $out"
grep -q "4 groups, 2 kept (a group's value: its best score); not renormalised; x 16" <<< "$out" || fail "v2 router: $out"
out=$("$sim" inspect "$families/gpt_oss_mxfp4")
grep -q "clamped SwiGLU (clamp(up, -1.25, 1.25) + 1)" <<< "$out" || fail "gpt-oss experts: $out"
grep -q "in MXFP4 as stored" <<< "$out" || fail "gpt-oss memory: $out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo '{"model_type": "jamba", "hidden_size": 64}' > "$tmp/config.json"
set +e
out=$("$sim" inspect "$tmp")
status=$?
set -e
[ "$status" -eq 1 ] || fail "a refused config exits $status, not 1"
grep -q "^refused     .*model_type 'jamba' is not supported" <<< "$out" || fail "no refusal: $out"
cat > "$tmp/config.json" <<'JSON'
{"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
 "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8,
 "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5,
 "first_k_dense_replace": 3, "moe_layer_freq": 1, "num_hidden_layers": 61, "num_nextn_predict_layers": 1,
 "vocab_size": 129280, "num_attention_heads": 128, "num_key_value_heads": 128, "hidden_act": "silu",
 "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16",
 "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}}
JSON
set +e
out=$("$sim" inspect "$tmp")
set -e
grep -q "MoE 3-60 (58), dense MLP 3" <<< "$out" || fail "DeepSeek-V3 layers: $out"
grep -q "11.3 GB in FP8 as stored, 22.6 GB in bf16, 45.3 GB in f32" <<< "$out" || fail "DeepSeek-V3 memory: $out"
grep -q "^weights     none readable here" <<< "$out" || fail "no weights line: $out"
echo "sim_inspect_test: all checks passed"
