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
# GGUF files: every family file the fixture wrote (exit 0, the family, its tensors, per-layer bytes), a
# truncated file and an unsupported architecture (exit 1, the reason).
while read -r name arch type layer tokens hidden tolerance file; do
  out=$("$sim" inspect "$families/gguf/$name/$file") || fail "$name: exit status $?"
  grep -q "^format      GGUF v3, " <<< "$out" || fail "$name: no format line: $out"
  grep -q "^family      $arch (" <<< "$out" || fail "$name: no family line for $arch: $out"
  grep -q "^              ffn_gate_inp.weight *F32 " <<< "$out" || fail "$name: no router tensor line: $out"
  grep -q "^memory      layer.* as stored (.*$type x" <<< "$out" || fail "$name: no memory line with $type: $out"
  grep -q "^supported   every MoE layer" <<< "$out" || fail "$name: no supported line: $out"
done < "$families/gguf/gguf.txt"
out=$("$sim" inspect "$families/gguf/deepseek2_v2_f16/tiny-deepseek2_v2_f16.gguf")
grep -q "^layers      3; MoE 1-2 (2), dense MLP 1" <<< "$out" || fail "deepseek2 layers: $out"
grep -q "4 groups, 2 kept (a group's value: its best score); not renormalised; x 16" <<< "$out" || fail "v2 router: $out"
head -c 200 "$families/gguf/olmoe_f32/tiny-olmoe_f32.gguf" > "$tmp/truncated.gguf"
set +e
out=$("$sim" inspect "$tmp/truncated.gguf")
status=$?
set -e
[ "$status" -eq 1 ] || fail "a truncated GGUF file exits $status, not 1"
grep -q "^refused     .*truncated.gguf: says it has" <<< "$out" || fail "no refusal of the truncated file: $out"
# GGUF, version 3, no tensors, one key: general.architecture = "falcon".
printf 'GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x14\x00\x00\x00\x00\x00\x00\x00general.architecture\x08\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00\x00falcon' > "$tmp/falcon.gguf"
set +e
out=$("$sim" inspect "$tmp/falcon.gguf")
status=$?
set -e
[ "$status" -eq 1 ] || fail "an unsupported architecture exits $status, not 1"
grep -q "^family      falcon: not loadable here" <<< "$out" || fail "no falcon family line: $out"
grep -q "^refused     .*general.architecture 'falcon' is not supported" <<< "$out" || fail "no falcon refusal: $out"
echo "sim_inspect_test: all checks passed"
