#!/usr/bin/env bash
# End-to-end tests of the moe-sim CLI. Usage: sim_cli_test.sh path/to/moe-sim
set -uo pipefail
SIM=${1:?usage: sim_cli_test.sh path/to/moe-sim}
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# expect_ok NAME ARGS...: exit 0, stdout in $TMP/out
expect_ok() {
  local name=$1; shift
  if "$SIM" "$@" >"$TMP/out" 2>"$TMP/err"; then pass "$name"; else fail "$name (rc=$?): $(cat "$TMP/err")"; fi
}
# expect_error NAME RC SUBSTRING ARGS...: exit RC and stderr containing SUBSTRING and "moe-sim: error:"
expect_error() {
  local name=$1 rc=$2 want=$3; shift 3
  "$SIM" "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  if [ "$got" -ne "$rc" ]; then fail "$name: exit $got, expected $rc ($(cat "$TMP/err"))"; return; fi
  if ! grep -qF -- "$want" "$TMP/err"; then fail "$name: stderr lacks '$want': $(cat "$TMP/err")"; return; fi
  if ! grep -qF "moe-sim: error:" "$TMP/err"; then fail "$name: no 'moe-sim: error:' prefix"; return; fi
  pass "$name"
}
# json_check NAME PYTHON-EXPR: evaluates EXPR with j = the JSON in $TMP/out; must be true
json_check() {
  local name=$1 expr=$2
  if $PY -c "import json,sys; j=json.load(open('$TMP/out')); sys.exit(0 if ($expr) else 1)"; then
    pass "$name"
  else
    fail "$name: $expr"; head -c 2000 "$TMP/out"
  fi
}

# --- help and version ---
expect_ok "help" --help
grep -q "sweep" "$TMP/out" || fail "help lists sweep"
expect_ok "version" --version
grep -q "moe-sim [0-9]" "$TMP/out" || fail "version prints moe-sim <version>"
for cmd in run sweep probe replay; do
  expect_ok "$cmd --help" $cmd --help
  grep -q -- "--capacity-factor" "$TMP/out" || fail "$cmd --help lists --capacity-factor"
done

# --- run ---
expect_ok "run table" run
grep -q "^# moe-sim [0-9.]* run .*experts=8" "$TMP/out" || fail "run table starts with the provenance line"
grep -q "drop_rate" "$TMP/out" || fail "run table shows drop_rate"
expect_ok "run --json" run --json
json_check "run json keys" "all(k in j for k in ['config','version','tokens','pairs','kept','rerouted','dropped','drop_rate','tokens_fully_dropped','capacity','expert_load','load_imbalance'])"
json_check "run json config" "all(k in j['config']['policy'] for k in ['capacity_factor','rounding','min_capacity','scope','priority','overflow','reroute_depth']) and all(k in j['config']['router'] for k in ['num_experts','top_k','scoring','renormalize']) and 'workload' in j['config'] and 'score_model' in j['config']"
json_check "run json sums" "j['kept']+j['rerouted']+j['dropped']==j['pairs'] and j['pairs']==2*j['tokens'] and len(j['expert_load'])==8"
expect_ok "run continuous --json" run --json --token-budget 128 --decode-len fixed:8 --arrival-rate 0.5 --quiet
json_check "continuous per-step stats" "j['steps']>1 and 'per_step' in j and 'drop_rate_max' in j['per_step'] and j['per_step']['peak_load_vs_nominal_max']>0 and 'per_step_mean' in j['capacity']"
expect_ok "run preset + overrides" run --json --preset qwen2-moe --top-k 2 --mode stable --priority score
json_check "precedence" "j['config']['router']['num_experts']==60 and j['config']['router']['top_k']==2 and j['config']['policy']['scope']=='prefix' and j['config']['policy']['lookahead']==16 and j['config']['policy']['priority']=='score'"

# Same seed -> byte-identical JSON; another seed differs.
"$SIM" run --json --seed 7 --token-budget 100 >"$TMP/a.json" 2>/dev/null
"$SIM" run --json --seed 7 --token-budget 100 >"$TMP/b.json" 2>/dev/null
"$SIM" run --json --seed 8 --token-budget 100 >"$TMP/c.json" 2>/dev/null
if cmp -s "$TMP/a.json" "$TMP/b.json"; then pass "same seed, same bytes"; else fail "same seed gave different JSON"; fi
if cmp -s "$TMP/a.json" "$TMP/c.json"; then fail "different seeds gave the same JSON"; else pass "seed matters"; fi

# --- scenario files ---
cat >"$TMP/s.toml" <<'TOML'
mode = "stable"
[router]
experts = 16
top-k = 4
[workload]
requests = 6
prompt-len = "lognormal:mean=100,sigma=0.5"
TOML
expect_ok "scenario" run --json --scenario "$TMP/s.toml" --top-k 2
json_check "scenario values, flag overrides" "j['config']['router']['num_experts']==16 and j['config']['router']['top_k']==2 and j['config']['policy']['scope']=='prefix' and j['requests']==6"
expect_ok "shipped scenario" run --scenario "$(dirname "$0")/../sim/scenarios/serving.toml" --quiet
echo "bogus-key = 1" >"$TMP/bad.toml"
expect_error "scenario unknown key" 2 "unknown setting" run --scenario "$TMP/bad.toml"
echo "top-k = = 1" >"$TMP/bad2.toml"
expect_error "scenario malformed" 1 "malformed scenario" run --scenario "$TMP/bad2.toml"

# --- threads: the thread count changes no byte of a result ---
for cmd in run sweep; do
  args=(--json --quiet --preset deepseek-v3 --requests 24 --prompt-len lognormal:mean=200,sigma=1,max=900
        --decode-len uniform:4,40 --token-budget 700 --arrival-rate 2 --mode stable)
  [ "$cmd" = sweep ] && args+=(--capacity-factors 1,2)
  "$SIM" $cmd "${args[@]}" --threads 1 >"$TMP/t1" 2>"$TMP/err" || fail "$cmd --threads 1: $(cat "$TMP/err")"
  "$SIM" $cmd "${args[@]}" --threads 2 >"$TMP/t2" 2>"$TMP/err" || fail "$cmd --threads 2: $(cat "$TMP/err")"
  "$SIM" $cmd "${args[@]}" --threads 5 >"$TMP/t5" 2>"$TMP/err" || fail "$cmd --threads 5: $(cat "$TMP/err")"
  if cmp -s "$TMP/t1" "$TMP/t2" && cmp -s "$TMP/t1" "$TMP/t5" && [ -s "$TMP/t1" ]; then
    pass "$cmd --threads 1, 2 and 5 print the same bytes"
  else
    fail "$cmd --threads 1, 2 and 5 differ"
  fi
done
"$SIM" run --json --quiet --token-budget 0 --requests 40 --threads 3 >"$TMP/t3" && "$SIM" run --json --quiet --token-budget 0 --requests 40 --threads 1 >"$TMP/t1" && cmp -s "$TMP/t1" "$TMP/t3" && pass "static batch: threads 1 and 3 the same" || fail "static batch: threads 1 and 3 differ"

# --- deployment (sim/deploy): the table, JSON sums, files, the same bytes for any thread count, errors ---
dep=(--preset deepseek-v3 --requests 24 --prompt-len lognormal:mean=200,sigma=1,max=900 --decode-len uniform:4,40
     --token-budget 700 --arrival-rate 2 --ep-size 16 --quiet)
expect_ok "deployment table" run "${dep[@]}"
grep -q "^ranks x nodes  *16 x 2 (8 per node)" "$TMP/out" || fail "deployment table: ranks x nodes"
grep -q "^step us (modelled, mean)" "$TMP/out" || fail "deployment table: step time"
for threads in 1 2 3; do
  "$SIM" run "${dep[@]}" --json --placement global --redundant-experts 16 --warmup-steps 3 --rank-capacity-factor 1.2 \
    --a2a normal --threads $threads >"$TMP/d$threads" 2>"$TMP/err" || fail "deployment --threads $threads: $(cat "$TMP/err")"
done
if cmp -s "$TMP/d1" "$TMP/d2" && cmp -s "$TMP/d1" "$TMP/d3" && [ -s "$TMP/d1" ]; then
  pass "deployment: --threads 1, 2 and 3 print the same bytes"
else
  fail "deployment: --threads 1, 2 and 3 differ"
fi
cp "$TMP/d1" "$TMP/out"
json_check "deployment json" "(lambda d, c: c['ep_size']==16 and c['nodes']==2 and c['placement']['policy']=='global' and d['placement']['physical_experts']==272 and d['warmup_steps']==3 and d['steps']==j['steps']-3 and d['computed_pairs']+d['dropped_by_expert_capacity']+d['dropped_by_rank_capacity']==d['pairs'] and d['dropped_by_rank_capacity']>0 and sum(d['per_rank']['pairs'])==d['computed_pairs'] and sum(d['per_rank']['tokens'])==d['tokens'] and len(d['per_rank']['gemm_us'])==16 and d['time']['step_mean_us']>0 and d['traffic']['dispatch']['row_bytes']==7392 and d['traffic']['combine']['rdma_bytes']>0)(j['deployment'], j['config']['deployment'])"
expect_ok "deployment sweep" sweep --preset deepseek-v3 --requests 16 --prompt-len fixed:64 --decode-len fixed:4 \
  --token-budget 512 --modes greedy,stable --capacity-factors 1.25 --axis ep-size=8,16 --axis redundant-experts=0,16 \
  --placement global --warmup-steps 1 --csv "$TMP/dep.csv" --deploy-csv "$TMP/ranks.csv" --deploy-svg "$TMP/dep.svg"
head -2 "$TMP/dep.csv" | tail -1 | grep -q "ep-size,redundant-experts,mode,cf,.*,step_us," || fail "sweep csv has the deployment columns"
[ "$(grep -c "" "$TMP/ranks.csv")" -eq $((2 + 2 * 2 * (8 + 16))) ] || fail "deploy-csv: a row per rank of every point"
$PY -c "import xml.dom.minidom,sys; d=xml.dom.minidom.parse('$TMP/dep.svg'); sys.exit(0 if len(d.getElementsByTagName('polyline'))==4 else 1)" \
  && pass "deploy-svg: a line per mode and redundancy" || fail "deploy-svg"
expect_ok "deployment scenario" run --scenario "$(dirname "$0")/../sim/scenarios/deepseek-v3-ep.toml" --requests 40 --prompt-len fixed:300 --json
json_check "deployment scenario json" "j['config']['deployment']['ep_size']==32 and j['deployment']['placement']['physical_experts']==288 and j['deployment']['warmup_steps']==16"
# EPLB from a recorded run's statistics (its routing.choices_per_expert), e.g. moe-sim replay of real logits.
"$SIM" run --preset deepseek-v3 --requests 8 --prompt-len fixed:64 --json --quiet >"$TMP/loads.json"
expect_ok "placement from a loads file" run --preset deepseek-v3 --requests 8 --prompt-len fixed:64 --ep-size 8 \
  --placement hierarchical --redundant-experts 8 --placement-loads "$TMP/loads.json" --json --quiet
json_check "loads file: replicated experts, no warm-up" "j['deployment']['placement']['physical_experts']==264 and j['deployment']['placement']['replicated_experts']>0 and j['deployment']['warmup_steps']==0 and j['deployment']['steps']==1"
expect_error "redundant needs eplb" 2 "redundant-experts needs an EPLB placement" run --preset deepseek-v3 --ep-size 8 --redundant-experts 8
expect_error "physical split" 2 "256 experts + 7 redundant = 263 physical experts do not split evenly over 8 ranks" run --preset deepseek-v3 --ep-size 8 --placement global --redundant-experts 7 --warmup-steps 1
expect_error "eplb needs loads" 2 "--warmup-steps N" run --preset deepseek-v3 --ep-size 8 --placement eplb
expect_error "shape needed" 2 "give --hidden and --expert-intermediate" run --ep-size 4
expect_error "unknown hardware" 2 "unknown hardware 'a100' (known: h800, h200, b200)" run --preset mixtral --ep-size 4 --hardware a100
expect_error "deploy-csv alone" 2 "deploy-csv needs a deployment" run --deploy-csv "$TMP/x.csv"
expect_error "missing loads file" 1 "cannot open loads file" run --preset deepseek-v3 --ep-size 8 --placement global --placement-loads "$TMP/none.json"
expect_error "threads negative" 2 "threads must be >= 0" run --threads -1

# --- sweep ---
expect_ok "sweep files" sweep --csv "$TMP/s.csv" --svg "$TMP/s.svg" --quiet
head -1 "$TMP/s.csv" | grep -q "^# moe-sim [0-9.]* sweep " || fail "csv starts with the provenance comment"
sed -n 2p "$TMP/s.csv" | grep -q "^mode,cf,drop_rate" || fail "csv header"
# One polyline per distinct curve, every mode named: greedy and rank-only drop the same pairs (batch scope), so
# they share one line named for both.
[ "$(grep -c '<polyline ' "$TMP/s.svg")" -eq 2 ] && grep -q 'data-series="greedy = rank-only"' "$TMP/s.svg" \
  && grep -q 'data-series="stable"' "$TMP/s.svg" || fail "svg has one polyline per distinct curve, every mode named"
grep -q "<desc>moe-sim" "$TMP/s.svg" || fail "svg desc records the config"
$PY -c "import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])" "$TMP/s.svg" && pass "svg parses as XML" || fail "svg is not XML"
expect_ok "sweep axis json" sweep --json --axis top-k=1,2 --capacity-factors 1,2 --modes greedy
json_check "sweep points" "len(j['points'])==4 and j['points'][0]['top-k']=='1' and 'drop_rate' in j['points'][0]"
expect_ok "sweep scopes" sweep --scopes batch,causal --capacity-factors 1 --modes greedy
grep -q "causal" "$TMP/out" || fail "sweep --scopes shows the scope axis"
# Every JSON point carries the whole policy it ran, whatever flags produced it (one writer: policy_json).
POLICY_KEYS="['mode','scope','priority','overflow','capacity_factor','rounding','min_capacity','reroute_depth','renormalize_survivors','seed','kernel']"
# Prefix scope (the stable mode's) also names its lookahead.
PREFIX_KEYS="['mode','scope','priority','overflow','capacity_factor','rounding','min_capacity','reroute_depth','renormalize_survivors','lookahead','seed','kernel']"
expect_ok "sweep --modes stable json" sweep --json --modes stable --capacity-factors 1,2
json_check "sweep points carry their policy" "all(list(p['policy'].keys())==$PREFIX_KEYS for p in j['points']) and all(p['policy']['scope']=='prefix' and p['policy']['lookahead']==16 and p['policy']['priority']=='request' and p['policy']['mode']=='stable' and p['policy']['kernel'] is None for p in j['points']) and [p['policy']['capacity_factor'] for p in j['points']]==[1.0,2.0]"
expect_ok "sweep scope axis json" sweep --json --scopes request,causal --modes greedy --capacity-factors 1
json_check "an axis point's policy has the axis value" "[p['policy']['scope'] for p in j['points']]==['request','causal'] and all(p['policy']['priority']=='arrival' for p in j['points'])"
expect_ok "run json policy" run --json --mode stable --priority score --overflow reroute
json_check "run carries its policy" "list(j['policy'].keys())==$PREFIX_KEYS and j['policy']['scope']=='prefix' and j['policy']['priority']=='score' and j['policy']['overflow']=='reroute'"
expect_ok "probe json policy" probe --json --trials 3 --modes greedy,stable
json_check "probe results carry their policy" "[r['policy']['scope'] for r in j['results']]==['batch','prefix'] and list(j['results'][0]['policy'].keys())==$POLICY_KEYS and list(j['results'][1]['policy'].keys())==$PREFIX_KEYS"
# run --seeds: one run per seed, a column (or a JSON entry) each.
expect_ok "run --seeds" run --seeds 3,1 --token-budget 64 --quiet
grep -q "^metric  *seed=3  *seed=1$" "$TMP/out" || fail "run --seeds: a column per seed: $(sed -n 2p "$TMP/out")"
grep -q "^expert_load seed=1: " "$TMP/out" || fail "run --seeds: expert_load per seed"
"$SIM" run --seed 1 --token-budget 64 --json --quiet >"$TMP/seed1.json"
expect_ok "run --seeds json" run --seeds 3,1 --token-budget 64 --json --quiet
json_check "run --seeds json entries" "[r['seed'] for r in j['runs']]==[3,1] and j['config']['seeds']==[3,1] and j['runs'][1]['dropped']==json.load(open('$TMP/seed1.json'))['dropped'] and j['runs'][1]['policy']['seed']==1"
expect_error "run --seeds empty" 2 "--seeds: no seeds" run --seeds ,
# A shipped scenario by name (share/moe/scenarios beside the program).
expect_ok "scenario by name" run --scenario serving --json --quiet
json_check "serving scenario" "j['config']['preset']=='mixtral' and j['config']['workload']['batching']=='continuous'"
elapsed=$($PY -c "import subprocess,sys,time; t=time.time(); subprocess.run([sys.argv[1],'sweep'],capture_output=True); print('%.2f'%(time.time()-t))" "$SIM")
if $PY -c "import sys; sys.exit(0 if float(sys.argv[1]) < 20 else 1)" "$elapsed"; then pass "default sweep in ${elapsed}s"; else fail "default sweep took ${elapsed}s"; fi

# --- probe ---
expect_ok "probe" probe --json --trials 25 --capacity-factor 1.0 --seed 3
json_check "probe stable invariant" "[r for r in j['results'] if r['mode']=='stable'][0]['displacement_rate']==0 and [r for r in j['results'] if r['mode']=='stable'][0]['distinct_outcomes']==1"
json_check "probe greedy displaced" "[r for r in j['results'] if r['mode']=='greedy'][0]['displacement_rate']>0"
expect_ok "probe table" probe --trials 5 --mode stable
grep -q "^stable" "$TMP/out" || fail "probe --mode restricts to that mode"

# --- replay ---
$PY - "$TMP" <<'PYEOF'
import struct, sys, math
d = sys.argv[1]
def npy(path, descr, shape, values, fmt):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
T, E = 6, 4
vals = [math.sin(i * 0.7) for i in range(T * E)]
npy(d + "/l.npy", "<f4", (T, E), vals, "f")
npy(d + "/f8.npy", "<f8", (T, E), vals, "d")
npy(d + "/f2.npy", "<f2", (T, E), vals, "e")
npy(d + "/i4.npy", "<i4", (T, E), list(range(T * E)), "i")
nan = list(vals); nan[4:8] = [float("nan")] * 4
npy(d + "/nan.npy", "<f4", (T, E), nan, "f")
open(d + "/trunc.npy", "wb").write(open(d + "/l.npy", "rb").read()[:-5])
with open(d + "/meta.csv", "w") as f:
    f.write("request_id,position\n" + "".join("%d,%d\n" % (t % 2, t // 2) for t in range(T)))
with open(d + "/short.csv", "w") as f:
    f.write("request_id,position\n0,0\n")
PYEOF
expect_ok "replay" replay --logits "$TMP/l.npy" --meta "$TMP/meta.csv" --out "$TMP/plan.csv" --mode stable
[ "$(sed -n 2p "$TMP/plan.csv")" = "token,j,expert,slot,weight,status" ] || fail "plan csv header"
[ "$(grep -c ',kept$\|,dropped$\|,rerouted$' "$TMP/plan.csv")" -eq 12 ] || fail "plan csv has one row per pair"
expect_ok "replay json" replay --logits "$TMP/l.npy" --out "$TMP/plan.csv" --json
json_check "replay json" "j['tokens']==6 and j['config']['router']['num_experts']==4"
# float64 (numpy's default) and float16 logits are converted, and stderr says so; the plan is the float32 one
# (the float32 file holds the same values rounded to nearest, as the conversion does).
expect_ok "replay float32" replay --logits "$TMP/l.npy" --meta "$TMP/meta.csv" --out "$TMP/plan32.csv" --mode stable
expect_ok "replay float64" replay --logits "$TMP/f8.npy" --meta "$TMP/meta.csv" --out "$TMP/plan64.csv" --mode stable
grep -qF "holds float64 logits; converted them to float32" "$TMP/err" || fail "replay float64 says it converted: $(cat "$TMP/err")"
cmp -s <(tail -n +2 "$TMP/plan32.csv") <(tail -n +2 "$TMP/plan64.csv") || fail "replay float64 gives the float32 plan"
expect_ok "replay float16" replay --logits "$TMP/f2.npy" --out "$TMP/p.csv"
grep -qF "holds float16 logits; converted them to float32" "$TMP/err" || fail "replay float16 says it converted"
expect_error "replay int dtype" 1 "dtype '<i4' is not supported" replay --logits "$TMP/i4.npy" --out "$TMP/p.csv"
grep -qF "a.astype('<f4')" "$TMP/err" || fail "replay int dtype names the numpy conversion: $(cat "$TMP/err")"
expect_error "replay directory" 1 "logits file '$TMP' is a directory, not a file" replay --logits "$TMP" --out "$TMP/p.csv"
expect_error "meta directory" 1 "meta file '$TMP' is a directory, not a file" replay --logits "$TMP/l.npy" --meta "$TMP" --out "$TMP/p.csv"
expect_error "replay truncated" 1 "truncated" replay --logits "$TMP/trunc.npy" --out "$TMP/p.csv"
expect_error "replay NaN row" 1 "token row 1 has no finite logit" replay --logits "$TMP/nan.npy" --out "$TMP/p.csv"
expect_error "replay meta length" 1 "has 1 rows but the logits have 6" replay --logits "$TMP/l.npy" --meta "$TMP/short.csv" --out "$TMP/p.csv"
expect_error "replay experts mismatch" 2 "does not match" replay --logits "$TMP/l.npy" --experts 8 --out "$TMP/p.csv"
expect_error "replay missing file" 1 "cannot open logits file" replay --logits "$TMP/none.npy" --out "$TMP/p.csv"
expect_error "replay needs --logits" 2 "needs --logits" replay --out "$TMP/p.csv"

# --- bad flags ---
expect_error "top-k > experts" 2 "top_k (9) exceeds num_experts (8)" run --top-k 9
expect_error "cf <= 0" 2 "capacity_factor must be finite and > 0" run --capacity-factor 0
# --- named score models and fit ---
expect_ok "scores mixtral-8x7b" run --json --preset mixtral --scores mixtral-8x7b --requests 200 --quiet
json_check "mixtral-8x7b inside the published ranges" "j['config']['score_model']['name']=='mixtral-8x7b' and 0.06<=j['routing']['expert_share_min'] and j['routing']['expert_share_max']<=0.19 and 0.14<=j['routing']['same_first_rate']<=0.28 and 0.45<=j['routing']['same_first_or_second_rate']<=0.67"
expect_error "unknown score model" 2 "unknown score model 'gpt'" run --scores gpt
expect_error "popularity count" 2 "popularity has 3 values, the router has 8 experts" run --popularity 1,2,3
expect_ok "fit" fit --logits "$TMP/l.npy" --meta "$TMP/meta.csv" --trace-out "$TMP/fit_trace.csv" --out "$TMP/fit.toml"
grep -q "^popularity = \[" "$TMP/fit.toml" || fail "fit writes the popularity"
expect_ok "fitted scenario runs" run --json --scenario "$TMP/fit.toml" --top-k 2 --quiet
json_check "fitted scenario: the recorded shape as one batch" "j['tokens']==6 and j['requests']==2 and j['steps']==1 and j['config']['router']['num_experts']==4 and j['config']['score_model']['skew']=='explicit' and len(j['config']['score_model']['popularity'])==4"
expect_ok "fit to stdout, moments" fit --logits "$TMP/l.npy" --meta "$TMP/meta.csv" --method moments
grep -q "^# Method: moments" "$TMP/out" || fail "fit --method moments says so"
expect_error "fit one request" 1 "too few requests to estimate a topic" fit --logits "$TMP/l.npy"
expect_error "fit meta rows" 1 "has 1 rows but the logits have 6" fit --logits "$TMP/l.npy" --meta "$TMP/short.csv"
expect_error "fit nan" 1 "is not finite" fit --logits "$TMP/nan.npy" --meta "$TMP/meta.csv"
expect_error "fit method" 2 "unknown method 'best'" fit --logits "$TMP/l.npy" --meta "$TMP/meta.csv" --method best
expect_error "fit needs logits" 2 "--logits is required" fit

expect_error "unknown mode" 2 "unknown dispatch mode 'fast'" run --mode fast
expect_error "unknown flag" 2 "--bogus" run --bogus
expect_error "bad integer" 2 "--experts: expected an integer" run --experts many
expect_error "bad dist" 2 "bad length distribution" run --prompt-len normal:3
expect_error "missing trace" 1 "cannot open trace file" run --trace "$TMP/none.csv"
expect_error "trace directory" 1 "trace file '$TMP' is a directory, not a file" run --trace "$TMP"
expect_error "scenario directory" 1 "scenario file '$TMP' is a directory, not a file" run --scenario "$TMP"
# A workload that cannot fit in memory is refused before it is generated, naming the memory it needs.
expect_error "workload too large" 1 "the workload needs at least" run --requests 100000000 --prompt-len fixed:100000
grep -qE "needs at least [0-9.]+ [PT]iB of memory \(1e\+08 requests, 1e\+13 tokens\)" "$TMP/err" || fail "workload too large names the memory: $(cat "$TMP/err")"
expect_error "no subcommand" 2 "subcommand" 
expect_error "bad axis" 2 "not a setting a sweep can vary" sweep --axis colour=red

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all CLI tests passed"
