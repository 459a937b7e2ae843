#!/usr/bin/python3
"""Trains the KJV MoE decoder (models/kjv-moe) deterministically on one CPU thread, and checks it.

    python/train/train_moe.py                 train, write models/kjv-moe/, compare the hash with the committed one
    python/train/train_moe.py --check         retrain (the configuration training.json records) into a scratch
                                              directory; fail unless model.safetensors has the committed SHA-256
                                              and tokenizer.json the committed bytes
    python/train/train_moe.py --eval          load the committed checkpoint: held-out perplexity and reference
                                              logits must equal what training.json / reference_logits.npy say
    python/train/train_moe.py --samples "In the beginning" ...   greedy completions from the committed model

Run it with /usr/bin/python3 (Debian's torch 1.13 + numpy) under `nice -n 10`; it pins one thread itself.
The corpus comes from scripts/fetch-corpus.sh (run automatically when --corpus lacks it). docs/training.md
describes the model, the data, the tokenizer and the determinism contract.
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

# One thread everywhere, set before torch is imported: with OMP_NUM_THREADS unset at import the same forward gives
# other bits (even after torch.set_num_threads(1)), so these are forced, not defaults.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bpe  # noqa: E402
import model as M  # noqa: E402
import safetensors_io  # noqa: E402

# The committed configuration. Changing any of these changes the checkpoint (and its hash).
DEFAULTS = dict(
    vocab_size=1024, hidden=256, num_layers=4, num_heads=4, num_experts=8, top_k=2, expert_ff=88,
    seq_len=256, batch=8, steps=720, lr=3e-3, min_lr_ratio=0.1, warmup=50, weight_decay=0.1,
    beta1=0.9, beta2=0.95, grad_clip=1.0, aux_coef=0.01, seed=1234,
)
REFERENCE_PROMPTS = 2      # reference logits: held-out sequences ...
REFERENCE_LENGTH = 32      # ... of this many tokens
SAMPLE_PROMPTS = ["In the beginning", "And Jesus said unto them,", "The LORD is my shepherd;"]
SAMPLE_TOKENS = 48


def setup_torch():
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.use_deterministic_algorithms(True)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_corpus(corpus_dir):
    paths = [os.path.join(corpus_dir, n) for n in ("train.txt", "heldout.txt")]
    if not all(os.path.exists(p) for p in paths):
        print("corpus: %s lacks train.txt/heldout.txt; running scripts/fetch-corpus.sh" % corpus_dir, flush=True)
        subprocess.run([os.path.join(ROOT, "scripts", "fetch-corpus.sh"), corpus_dir], check=True)
    out = []
    for p in paths:
        with open(p, "rb") as f:
            out.append(f.read())
    return out


def shape_from(cfg):
    return M.Shape(cfg["vocab_size"], cfg["hidden"], cfg["num_layers"], cfg["num_heads"], cfg["num_experts"],
                   cfg["top_k"], cfg["expert_ff"], cfg["seq_len"])


def lr_at(step, cfg):
    """Linear warmup to lr over `warmup` steps, then cosine down to min_lr_ratio * lr at the last step."""
    if step < cfg["warmup"]:
        return cfg["lr"] * (step + 1) / cfg["warmup"]
    t = (step - cfg["warmup"]) / max(1, cfg["steps"] - 1 - cfg["warmup"])
    r = cfg["min_lr_ratio"]
    return cfg["lr"] * (r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * t)))


class Batches:
    """Epochs of non-overlapping windows of seq_len + 1 tokens: each epoch draws an offset in [0, seq_len) and a
    permutation of the windows (torch.Generator seeded with seed + 1), and hands them out batch rows at a time."""

    def __init__(self, stream, seq_len, batch, seed):
        self.stream, self.T, self.B = stream, seq_len, batch
        self.g = torch.Generator().manual_seed(seed + 1)
        self.queue, self.epoch = [], 0

    def next(self):
        while len(self.queue) < self.B:
            offset = int(torch.randint(0, self.T, (1,), generator=self.g))
            count = (self.stream.numel() - offset - 1) // self.T
            starts = offset + torch.randperm(count, generator=self.g) * self.T
            self.queue.extend(starts.tolist())
            self.epoch += 1
        starts, self.queue = self.queue[:self.B], self.queue[self.B:]
        return torch.stack([self.stream[s:s + self.T + 1] for s in starts])


def evaluate(model, stream, seq_len, batch, routing=False, max_windows=None):
    """Mean next-token cross-entropy (nats) over `stream`: windows of seq_len inputs at stride seq_len, every token
    but the first predicted exactly once (the last window is shorter). Full windows run `batch` at a time.
    Returns (mean loss, tokens predicted, routing list or None)."""
    T = seq_len
    starts = list(range(0, stream.numel() - 1, T))
    if max_windows is not None:
        starts = starts[:max_windows]
    total, count = 0.0, 0
    chosen = [] if routing else None
    full = [s for s in starts if s + T + 1 <= stream.numel()]
    rest = [s for s in starts if s + T + 1 > stream.numel()]
    with torch.no_grad():
        groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[s] for s in rest]
        for group in groups:
            n = min(T, stream.numel() - 1 - group[0])
            x = torch.stack([stream[s:s + n + 1] for s in group])
            layers = [] if routing else None
            logits, _ = model(x[:, :-1], layers)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
            total += float(loss.to(torch.float64))
            count += x.shape[0] * n
            if routing:
                L = len(layers)
                chosen.append(torch.stack(layers).view(L, x.shape[0], n, -1))  # [L, B, n, k]
    return total / count, count, chosen


def routing_stats(chosen, num_experts):
    """Per layer: share of (token, choice) pairs per expert, share of first choices per expert, and how often a
    token and the next token of the same sequence keep the first-choice expert / share at least one of the top-2."""
    L = chosen[0].shape[0]
    out = []
    for l in range(L):
        pair_counts = torch.zeros(num_experts, dtype=torch.float64)
        first_counts = torch.zeros(num_experts, dtype=torch.float64)
        same_first = same_any = transitions = 0
        for c in chosen:
            e = c[l]  # [B, n, k]
            pair_counts += torch.bincount(e.reshape(-1), minlength=num_experts).double()
            first_counts += torch.bincount(e[..., 0].reshape(-1), minlength=num_experts).double()
            a, b = e[:, :-1], e[:, 1:]
            same_first += int((a[..., 0] == b[..., 0]).sum())
            overlap = (a.unsqueeze(-1) == b.unsqueeze(-2)).any(dim=-1).any(dim=-1)
            same_any += int(overlap.sum())
            transitions += a.shape[0] * a.shape[1]
        # Baseline: the same choices paired at random (a fixed permutation), i.e. these loads without order.
        rows = torch.cat([c[l].reshape(-1, c[l].shape[-1]) for c in chosen])
        other = rows[torch.randperm(rows.shape[0], generator=torch.Generator().manual_seed(0))]
        base_first = float((rows[:, 0] == other[:, 0]).double().mean())
        base_any = float((rows.unsqueeze(-1) == other.unsqueeze(-2)).any(-1).any(-1).double().mean())
        out.append({
            "expert_pair_share": [round(float(v), 4) for v in pair_counts / pair_counts.sum()],
            "expert_first_choice_share": [round(float(v), 4) for v in first_counts / first_counts.sum()],
            "max_over_mean_load": round(float(pair_counts.max() / pair_counts.mean()), 4),
            "consecutive_same_first_choice": round(same_first / transitions, 4),
            "consecutive_top2_overlap": round(same_any / transitions, 4),
            "transitions": transitions,
            "shuffled_same_first_choice": round(base_first, 4),
            "shuffled_top2_overlap": round(base_any, 4),
        })
    return out


def greedy(model, tok, prompt, n_new):
    """Greedy completion (argmax, ties to the lower id, as moe::model::Model::argmax) by full recomputation."""
    ids = tok.encode(prompt)
    with torch.no_grad():
        for _ in range(n_new):
            if len(ids) >= model.shape.max_positions:
                break
            logits, _ = model(torch.tensor([ids]))
            row = logits[0, -1]
            best = torch.nonzero(row == row.max())[0, 0]
            ids.append(int(best))
    return ids


def shortest_f32(v):
    """The shortest decimal that reads back as the same float32 (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(v)))


def hf_config(cfg):
    s = shape_from(cfg)
    return {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "vocab_size": s.vocab_size,
        "hidden_size": s.hidden,
        "intermediate_size": s.expert_ff,
        "num_hidden_layers": s.num_layers,
        "num_attention_heads": s.num_heads,
        "num_key_value_heads": s.num_heads,
        "head_dim": s.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": s.max_positions,
        "initializer_range": 0.02,
        "rms_norm_eps": shortest_f32(s.rms_eps),
        "rope_theta": shortest_f32(s.rope_theta),
        "sliding_window": None,
        "attention_dropout": 0.0,
        "num_local_experts": s.num_experts,
        "num_experts_per_tok": s.top_k,
        "output_router_logits": False,
        "router_aux_loss_coef": cfg["aux_coef"],
        "router_jitter_noise": 0.0,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": 10,
        "pad_token_id": None,
        "torch_dtype": "float32",
    }


def safetensors_metadata(shape):
    """"format": "pt" (what Hugging Face transformers requires) plus the moe-model/1 shape fields."""
    meta = {"format": "pt"}
    for k in M.Shape.FIELDS:
        v = getattr(shape, k)
        meta[k] = ("%.9g" % v) if isinstance(v, float) else str(v)
    return meta


def shape_from_hf(config):
    return M.Shape(config["vocab_size"], config["hidden_size"], config["num_hidden_layers"],
                   config["num_attention_heads"], config["num_local_experts"], config["num_experts_per_tok"],
                   config["intermediate_size"], config["max_position_embeddings"], config["rms_norm_eps"],
                   config["rope_theta"])


def load_checkpoint(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    if config["num_key_value_heads"] != config["num_attention_heads"] or config["tie_word_embeddings"]:
        raise ValueError("only multi-head attention and an untied lm_head are supported")
    shape = shape_from_hf(config)
    m = M.MoEDecoder(shape)
    tensors, _ = safetensors_io.read(os.path.join(model_dir, "model.safetensors"))
    m.load_hf_tensors(tensors)
    m.eval()
    tok = bpe.Tokenizer.load(os.path.join(model_dir, "tokenizer.json"))
    return m, tok, config


def reference_tokens(held_stream):
    """REFERENCE_PROMPTS sequences of REFERENCE_LENGTH held-out tokens: the start of the held-out text (Ruth 1:1)
    and the window starting at the middle of the held-out stream."""
    mid = held_stream.numel() // 2
    return torch.stack([held_stream[0:REFERENCE_LENGTH], held_stream[mid:mid + REFERENCE_LENGTH]])


def router_margin(model, tokens):
    """Smallest gap between the 2nd and 3rd router probability over the reference rows and layers (how far the
    top-2 choice is from flipping under rounding differences)."""
    margins = []

    def hook(l, x):
        probs, _, _ = model.route(l, x)
        top3 = torch.sort(probs, dim=-1, descending=True, stable=True).values[:, :3]
        margins.append(float((top3[:, 1] - top3[:, 2]).min()))

    original = model.moe

    def moe(l, x, stats=None):
        hook(l, x)
        return original(l, x, stats)

    model.moe = moe
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        del model.moe
    return min(margins)


def train(cfg, out_dir, corpus_dir, log_every=25):
    setup_torch()
    t_start = time.time()
    train_text, held_text = load_corpus(corpus_dir)

    t0 = time.time()
    merges = bpe.train_bpe(train_text, cfg["vocab_size"])
    tok = bpe.Tokenizer(merges)
    train_stream = torch.tensor(tok.encode(train_text), dtype=torch.long)
    held_stream = torch.tensor(tok.encode(held_text), dtype=torch.long)
    t_tok = time.time() - t0
    print("tokenizer: %d tokens, %d merges; train %d tokens (%.3f bytes/token), held-out %d tokens (%.1fs)"
          % (tok.vocab_size, len(merges), train_stream.numel(), len(train_text) / train_stream.numel(),
             held_stream.numel(), t_tok), flush=True)

    shape = shape_from(cfg)
    model = M.MoEDecoder(shape, torch.Generator().manual_seed(cfg["seed"]))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=1e-8, foreach=False)
    batches = Batches(train_stream, cfg["seq_len"], cfg["batch"], cfg["seed"])
    print("model: %d parameters (%.2f MB fp32); %d steps of %d x %d tokens"
          % (shape.num_parameters(), shape.num_parameters() * 4 / 1e6, cfg["steps"], cfg["batch"],
             cfg["seq_len"]), flush=True)

    log = []
    t_train = time.time()
    cpu_train = time.process_time()
    window_ce = window_aux = 0.0
    window_n = 0
    last_ce = []
    for step in range(cfg["steps"]):
        lr = lr_at(step, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        x = batches.next()
        logits, aux = model(x[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, shape.vocab_size), x[:, 1:].reshape(-1))
        loss = ce + cfg["aux_coef"] * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        opt.step()
        ce_v, aux_v = float(ce), float(aux) / shape.num_layers
        window_ce += ce_v
        window_aux += aux_v
        window_n += 1
        last_ce.append(ce_v)
        last_ce = last_ce[-50:]
        if (step + 1) % log_every == 0 or step == 0 or step + 1 == cfg["steps"]:
            elapsed = time.time() - t_train
            entry = {"step": step + 1, "train_ce": round(window_ce / window_n, 4),
                     "balance_loss_per_layer": round(window_aux / window_n, 4), "lr": round(lr, 6),
                     "epoch": batches.epoch, "elapsed_s": round(elapsed, 1)}
            log.append(entry)
            print("step %4d  ce %.4f  balance %.4f  lr %.2e  epoch %d  %.1fs (%.2fs/step)"
                  % (step + 1, entry["train_ce"], entry["balance_loss_per_layer"], lr, batches.epoch, elapsed,
                     elapsed / (step + 1)), flush=True)
            window_ce = window_aux = 0.0
            window_n = 0
    train_seconds = time.time() - t_train
    train_cpu_seconds = time.process_time() - cpu_train
    model.eval()

    os.makedirs(out_dir, exist_ok=True)
    st_path = os.path.join(out_dir, "model.safetensors")
    safetensors_io.write(st_path, model.hf_tensors(), safetensors_metadata(shape))
    digest = sha256_file(st_path)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(cfg), f, indent=2)
        f.write("\n")
    print("model.safetensors sha256 %s (%d bytes), training %.1fs wall, %.1fs cpu"
          % (digest, os.path.getsize(st_path), train_seconds, train_cpu_seconds), flush=True)

    # Evaluate what was written (the file's weights are the trained fp32 weights, bit for bit).
    model, tok, _ = load_checkpoint(out_dir)
    t0 = time.time()
    held_loss, held_count, chosen = evaluate(model, held_stream, cfg["seq_len"], cfg["batch"], routing=True)
    n_train_windows = (held_stream.numel() - 1) // cfg["seq_len"] + 1
    train_eval_stream = train_stream[:n_train_windows * cfg["seq_len"] + 1]
    train_loss, train_count, _ = evaluate(model, train_eval_stream, cfg["seq_len"], cfg["batch"])
    eval_seconds = time.time() - t0
    stats = routing_stats(chosen, shape.num_experts)
    ref = reference_tokens(held_stream)
    with torch.no_grad():
        ref_logits, _ = model(ref)
    np.save(os.path.join(out_dir, "reference_tokens.npy"), ref.numpy().astype("<i4"))
    np.save(os.path.join(out_dir, "reference_logits.npy"), ref_logits.numpy().astype("<f4"))
    margin = router_margin(model, ref)
    samples = []
    for p in SAMPLE_PROMPTS:
        ids = greedy(model, tok, p, SAMPLE_TOKENS)
        samples.append({"prompt": p, "prompt_tokens": len(tok.encode(p)), "tokens": ids,
                        "text": tok.decode(ids)})
    held_bytes = len(held_text)
    report = {
        "command": "nice -n 10 /usr/bin/python3 python/train/train_moe.py",
        "config": cfg,
        "parameters": shape.num_parameters(),
        "corpus": {
            "source": "Debian bible-kjv-text 4.38 via `bible -f Gen1:1-Rev22:21` (scripts/fetch-corpus.sh)",
            "heldout_books": ["Ruth", "Ecclesiastes", "Jonah", "Acts", "Philippians"],
            "train_bytes": len(train_text), "heldout_bytes": held_bytes,
            "train_tokens": train_stream.numel(), "heldout_tokens": held_stream.numel(),
            "train_sha256": hashlib.sha256(train_text).hexdigest(),
            "heldout_sha256": hashlib.sha256(held_text).hexdigest(),
        },
        "tokens_trained": cfg["steps"] * cfg["batch"] * cfg["seq_len"],
        "epochs": round(cfg["steps"] * cfg["batch"] * cfg["seq_len"] / train_stream.numel(), 3),
        "final_train_ce_last50_steps": round(sum(last_ce) / len(last_ce), 4),
        "train_eval": {"loss": train_loss, "perplexity": math.exp(train_loss), "tokens": train_count,
                       "what": "the first %d train tokens, evaluated like the held-out set" % train_count},
        "heldout": {"loss": held_loss, "perplexity": math.exp(held_loss), "tokens": held_count,
                    "bits_per_byte": held_loss * held_count / math.log(2) / held_bytes},
        "model_safetensors_sha256": digest,
        "model_safetensors_bytes": os.path.getsize(st_path),
        "tokenizer_json_sha256": sha256_file(os.path.join(out_dir, "tokenizer.json")),
        "wall_seconds": {"tokenizer": round(t_tok, 1), "training": round(train_seconds, 1),
                         "training_cpu": round(train_cpu_seconds, 1),
                         "evaluation": round(eval_seconds, 1), "total": round(time.time() - t_start, 1)},
        "machine": {"torch": torch.__version__, "numpy": np.__version__, "threads": torch.get_num_threads(),
                    "cpu": cpu_name(), "cpu_flags": cpu_flags(), "torch_capability": torch_capability()},
        "reference": {"tokens": "reference_tokens.npy [%d, %d] int32" % tuple(ref.shape),
                      "logits": "reference_logits.npy [%d, %d, %d] float32 (dropless, fp32, this forward)"
                      % tuple(ref_logits.shape),
                      "min_router_top2_margin": margin},
        "routing_heldout": stats,
        "samples": samples,
        "log": log,
    }
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print("held-out loss %.4f (perplexity %.3f, %.4f bits/byte); train-eval loss %.4f (perplexity %.3f)"
          % (held_loss, math.exp(held_loss), report["heldout"]["bits_per_byte"], train_loss, math.exp(train_loss)))
    for l, s in enumerate(stats):
        print("layer %d: max/mean load %.3f, consecutive same first choice %.3f (shuffled %.3f), top-2 overlap "
              "%.3f (shuffled %.3f)" % (l, s["max_over_mean_load"], s["consecutive_same_first_choice"],
                                       s["shuffled_same_first_choice"], s["consecutive_top2_overlap"],
                                       s["shuffled_top2_overlap"]))
    for s in samples:
        print("sample: %r" % s["text"])
    return report


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_flags():
    """The vector ISA flags of /proc/cpuinfo that decide which kernels torch and its libraries pick."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if x in have]
    except OSError:
        pass
    return None


def torch_capability():
    """The "CPU capability usage" line of torch's build configuration (e.g. AVX2)."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage" in line:
            return line.split(":", 1)[1].strip()
    return None


def committed_report(model_dir):
    path = os.path.join(model_dir, "training.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def cmd_check(args, cfg):
    committed = committed_report(args.model_dir)
    if committed is None:
        sys.exit("check: %s/training.json is missing" % args.model_dir)
    with tempfile.TemporaryDirectory(prefix="kjv-moe-check-") as tmp:
        report = train(cfg, tmp, args.corpus)
        ok = True
        if report["model_safetensors_sha256"] != committed["model_safetensors_sha256"]:
            print("check: FAILED: model.safetensors sha256 %s, committed %s"
                  % (report["model_safetensors_sha256"], committed["model_safetensors_sha256"]))
            ok = False
        else:
            print("check: model.safetensors sha256 matches the committed %s" % committed["model_safetensors_sha256"])
        with open(os.path.join(tmp, "tokenizer.json"), "rb") as a, \
                open(os.path.join(args.model_dir, "tokenizer.json"), "rb") as b:
            if a.read() != b.read():
                print("check: FAILED: tokenizer.json differs from the committed one")
                ok = False
            else:
                print("check: tokenizer.json matches")
        if os.path.exists(os.path.join(args.model_dir, "model.safetensors")):
            actual = sha256_file(os.path.join(args.model_dir, "model.safetensors"))
            if actual != committed["model_safetensors_sha256"]:
                print("check: FAILED: the committed model.safetensors does not have training.json's sha256")
                ok = False
    sys.exit(0 if ok else 1)


def cmd_eval(args):
    setup_torch()
    committed = committed_report(args.model_dir)
    model, tok, config = load_checkpoint(args.model_dir)
    ok = True
    digest = sha256_file(os.path.join(args.model_dir, "model.safetensors"))
    if committed and digest != committed["model_safetensors_sha256"]:
        print("eval: FAILED: model.safetensors sha256 %s but training.json says %s"
              % (digest, committed["model_safetensors_sha256"]))
        ok = False
    # Reference logits: this forward must reproduce them (same machine class: bit for bit; any: 1e-5 relative).
    ref = torch.from_numpy(np.load(os.path.join(args.model_dir, "reference_tokens.npy")).astype(np.int64))
    want = np.load(os.path.join(args.model_dir, "reference_logits.npy"))
    with torch.no_grad():
        got = model(ref)[0].numpy()
    rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print("eval: reference logits: max |diff| / max |logit| = %.3g (%s)"
          % (rel, "bit-identical" if np.array_equal(got, want) else "not bit-identical"))
    if rel > 1e-5:
        print("eval: FAILED: reference logits differ by more than 1e-5 relative")
        ok = False
    if not args.no_perplexity:
        train_text, held_text = load_corpus(args.corpus)
        held_stream = torch.tensor(tok.encode(held_text), dtype=torch.long)
        if committed and committed["corpus"]["heldout_sha256"] != hashlib.sha256(held_text).hexdigest():
            print("eval: FAILED: the held-out text differs from the one the model was evaluated on")
            ok = False
        t0 = time.time()
        seq = config["max_position_embeddings"]
        batch = committed["config"]["batch"] if committed else 8
        loss, count, _ = evaluate(model, held_stream, seq, batch)
        print("eval: held-out loss %.6f, perplexity %.4f over %d tokens (%.1fs)"
              % (loss, math.exp(loss), count, time.time() - t0))
        if committed:
            want_loss = committed["heldout"]["loss"]
            print("eval: training.json says loss %.6f, perplexity %.4f" % (want_loss, math.exp(want_loss)))
            if abs(loss - want_loss) > 1e-6 * abs(want_loss) or count != committed["heldout"]["tokens"]:
                print("eval: FAILED: held-out loss differs from training.json")
                ok = False
    print("eval: %s" % ("OK" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


def cmd_samples(args):
    setup_torch()
    model, tok, _ = load_checkpoint(args.model_dir)
    for p in args.samples:
        ids = greedy(model, tok, p, args.tokens)
        print(repr(tok.decode(ids)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "models", "kjv-moe"))
    ap.add_argument("--out", default=None, help="where training writes (default: --model-dir)")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "data", "kjv"))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--no-perplexity", action="store_true", help="--eval: reference logits only")
    ap.add_argument("--samples", nargs="+", default=None)
    ap.add_argument("--tokens", type=int, default=SAMPLE_TOKENS)
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    args = ap.parse_args()
    cfg = {k: getattr(args, k) for k in DEFAULTS}
    if args.eval:
        cmd_eval(args)
    elif args.samples:
        cmd_samples(args)
    elif args.check:
        if cfg != DEFAULTS:
            sys.exit("check: --check retrains the configuration training.json records; drop the other options")
        committed = committed_report(args.model_dir)
        if committed is None:
            sys.exit("check: %s/training.json is missing" % args.model_dir)
        cmd_check(args, committed["config"])
    else:
        out = args.out or args.model_dir
        committed = committed_report(args.model_dir)  # read before training overwrites it
        report = train(cfg, out, args.corpus)
        if committed and cfg == committed["config"]:
            same = committed["model_safetensors_sha256"] == report["model_safetensors_sha256"]
            print("sha256 %s the committed checkpoint's" % ("equals" if same else "DIFFERS FROM"))


if __name__ == "__main__":
    main()
