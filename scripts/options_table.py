#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Renders docs/options.md from the output of tests/docs/option_keys.cpp (one line per optimizer: label TAB keys).

Usage: scripts/options_table.py KEYS_FILE OUT_MD. The CTest docs.options_table renders it anew and compares it with the
committed docs/options.md; after a key is added, run the option_keys program of the library build and this script:
  build/tests/matopt_option_keys > keys.txt && python3 scripts/options_table.py keys.txt docs/options.md
"""
import sys
from pathlib import Path

out_lines = Path(sys.argv[1]).read_text().strip().split("\n")
keys_of = {}
order = []
for line in out_lines:
    label, keys = line.split("\t")
    keys_of[label] = [k.strip() for k in keys.split(",") if k.strip()]
    order.append(label)
presets = [l for l in order if "composition" not in l]
matrix = [l for l in presets if l not in ("adamw", "lion")]

# key -> (values / default, meaning, doc link)
D = {
 "lr": ("number > 0; preset default", "the learning rate η", "optimizers.md#shared-options"),
 "momentum": ("[0, 1); 0.95", "β of the momentum (refused by Dion, whose momentum is `mu`)", "optimizers.md#shared-options"),
 "nesterov": ("boolean; the preset's", "the Nesterov form of the momentum", "optimizers.md#shared-options"),
 "weight_decay": ("number ≥ 0; preset default", "λ (decoupled, except OrScale's coupled trust ratio)", "optimizers.md#shared-options"),
 "non_finite": ("`throw` (default), `skip`, `zero`", "what a gradient holding inf or NaN does", "api.md#non-finite-gradients"),
 "ns_schedule": ("`jordan`, `you`, `polar_express`, `cubic`, `quintic`, `turbo`", "the Newton–Schulz schedule by name; replaces the whole schedule (applied before the other keys)", "policies.md#schedules"),
 "ns_steps": ("integer ≥ 1; 5 (Turbo 4); `auto` (Muon only: MuonAutoSteps)", "K, the Newton–Schulz steps", "policies.md#newtonschulz"),
 "ns_safety": ("number > 0; 1 (Polar Express 1.02)", "κ in X / (κ‖X‖_F + ε)", "policies.md#newtonschulz"),
 "ns_eps": ("number ≥ 0; 1e-7 (Polar Express, Turbo 1e-6)", "ε of the normalization (of the row sums under AOL)", "policies.md#newtonschulz"),
 "ns_aol": ("boolean; `false` (Turbo `true`)", "AOL row scaling in place of the Frobenius normalization (Turbo-Muon); refused by `muon` with `ns_steps=auto`", "policies.md#newtonschulz"),
 "ns_variant": ("`auto` (default), `plain`, `gram`", "plain or Gram Newton–Schulz; `auto`: Gram when s ≥ `gram_aspect`·r", "policies.md#newtonschulz"),
 "gram_aspect": ("number ≥ 1; 4", "the aspect ratio at which `auto` takes the Gram form", "policies.md#newtonschulz"),
 "ns_dtype": ("`float32` (default), `bfloat16` (needs oneDNN; host only)", "the precision of the Newton–Schulz products: bfloat16 operands, float accumulation", "math.md#newton-schulz-in-bfloat16"),
 "heads": ("integer ≥ 1; 1", "H equal blocks of rows, each orthogonalized alone (per-head); refused by OrScale and PolarGrad (at `step`) and by `muon` with `ns_steps=auto`", "optimizers.md#row-blocks-heads-and-split_sizes"),
 "split_sizes": ("comma-separated integers; empty", "contiguous blocks of these heights (split QKV); refused as `heads` is", "optimizers.md#row-blocks-heads-and-split_sizes"),
 "split_groups": ("integer ≥ 1; 1", "G interleaved groups of `split_sizes` (Megatron-LM's QKV layout); refused as `heads` is", "optimizers.md#row-blocks-heads-and-split_sizes"),
 "norm_eps": ("number > 0; 1e-12", "ε in max(‖u‖₂, ε) of row / column normalization", "policies.md#rownormalize"),
 "clip_min": ("number > 0; 0.5", "lower clip of OrScale's trust ratio", "policies.md#trustratio"),
 "clip_max": ("number ≥ `clip_min`; 1.5", "upper clip of OrScale's trust ratio", "policies.md#trustratio"),
 "trust_eps": ("number > 0; 1e-6", "ε of OrScale's trust ratio", "policies.md#trustratio"),
 "calibrate": ("boolean; `false`", "calibrate c at the first step so that r₀ = 1 (OrScale-LM)", "policies.md#trustratio"),
 "trust_coefficient": ("number > 0; 0.001", "η_t of the LARS ratio", "policies.md#trustratio"),
 "beta1": ("[0, 1); 0.9", "AdamW: β₁; Lion: the interpolation of the direction", "optimizers/adamw.md"),
 "beta2": ("[0, 1); 0.95 (Lion 0.99)", "AdamW: β₂; Lion: the momentum's decay; NorMuon, AdaMuon, NAMO: β₂ of the second moment", "policies.md#secondmoment"),
 "eps": ("number > 0; 1e-8", "AdamW's ε", "optimizers/adamw.md"),
 "moment_eps": ("number > 0; 1e-8 (NorMuon 1e-10)", "ε added to √S and to the rescale's norm", "policies.md#secondmoment"),
 "normuon_axis": ("`rows` (default), `longer`", "NorMuon's averaging axis: per row, or per row/column of the longer side", "policies.md#secondmoment"),
 "rms_target": ("number > 0; 0.2", "AdaMuon's RMS of the direction", "policies.md#secondmoment"),
 "mu": ("[0, 1); 0.95", "μ of Dion's error feedback", "policies.md#dionpoweriteration"),
 "rank_fraction": ("(0, 1]; 1", "Dion's rank r / min(m, n) before rounding (fixed at `make_state`)", "policies.md#dionpoweriteration"),
 "rank_multiple_of": ("integer ≥ 1; 1", "Dion's rank rounded up to a multiple of it", "policies.md#dionpoweriteration"),
 "dion_eps": ("number > 0; 1e-8", "ε of Q's column normalization", "policies.md#dionpoweriteration"),
 "ns_plan_every": ("integer ≥ 1; 100", "re-plan K every this many steps of a parameter", "policies.md#autosteps"),
 "ns_plan_quantile": ("(0, 1]; 0.05", "p of the tracked singular-value quantile", "policies.md#autosteps"),
 "ns_plan_tau": ("number > 0; 0.5", "the band the quantile's direction must reach", "policies.md#autosteps"),
 "ns_plan_max_steps": ("integer in [1, 1000]; 10", "the most steps a plan chooses", "policies.md#autosteps"),
 "lr_rule": ("`preset` (default), `unit`, `muon_original`, `sqrt_max`, `sqrt_ratio`", "s(m, n) in place of the preset's shape rule", "policies.md#step-rules"),
 "extra_scale_factor": ("number > 0; 1", "multiplies s(m, n) under every rule", "policies.md#step-rules"),
 "weight_decay_method": ("`decoupled` (default), `cautious`, `independent`", "the weight-decay form (OrScale: `decoupled` only)", "policies.md#step-rules"),
 "cautious_weight_decay": ("boolean", "`true` sets `cautious`, `false` sets `decoupled`", "policies.md#step-rules"),
 "adaptive_threshold": ("number ≥ 0; 1", "use the cheap preconditioner while r_min ≥ it", "policies.md#adaptive"),
 "adaptive_every": ("integer ≥ 1; 100", "check every this many steps", "policies.md#adaptive"),
 "cap_threshold": ("number ≥ 0; 0 (always)", "cap only while σ₁ ≥ it", "policies.md#spectralcap"),
 "cap_power_iterations": ("integer ≥ 1; 1", "power iterations per step", "policies.md#spectralcap"),
 "cap_initial_iterations": ("integer ≥ 1; 30", "power iterations at a parameter's first step", "policies.md#spectralcap"),
}

all_keys = []
for l in order:
    for k in keys_of[l]:
        if k not in all_keys:
            all_keys.append(k)
missing = [k for k in all_keys if k not in D]
if missing:
    sys.exit(f"render: no description for {missing}")

def accepted(k):
    names = [l for l in presets if k in keys_of[l]]
    comps = [l.replace(" composition", "") for l in order if "composition" in l and k in keys_of[l]
             and not any(k in keys_of[p] for p in presets)]
    lacking = [m for m in matrix if m not in names]
    if names and set(matrix) <= set(names) and set(names) <= set(matrix):
        s = "every matrix preset"
    elif names and set(names) <= set(matrix) and len(lacking) == 1:
        s = f"every matrix preset but `{lacking[0]}`"
    elif names and set(names) == set(presets):
        s = "every optimizer"
    else:
        s = ", ".join(f"`{n}`" if " " not in n else f"`muon` with `ns_steps=auto`" for n in names)
    if comps:
        s = (s + "; " if s else "") + "compositions with " + ", ".join(f"`{c}`" for c in comps)
    return s

rows = []
for k in all_keys:
    v, meaning, link = D[k]
    rows.append(f"| `{k}` | {accepted(k)} | {v} | {meaning} ([entry]({link})) |")

per = []
for l in order:
    name = f"`{l}`" if "composition" not in l and " " not in l else (f"`muon` with `ns_steps=auto`" if " " in l and "composition" not in l else l.replace(" composition", "") + " (a composition)")
    if "composition" in l:
        name = "`" + l.replace(" composition", "") + "` (a composition)"
    per.append(f"| {name} | {', '.join(f'`{k}`' for k in keys_of[l])} |")

page = f"""# Option keys

Every text option key, in one table: what `make_optimizer<T>(name, {{{{key, value}}, …}})`, `AnyOptimizer::set(key,
value)`, `TorchOptimizer`'s config and `HybridOptimizer`'s routes accept. Each key sets one field of a typed
optimizer's `Options` ([api.md](api.md#run-time-facade) for values as text and error messages; the linked entries for
each field). Unknown keys, and keys an optimizer does not take, are refused with the list of the keys it knows.

The "known to" column and the table per optimizer below are generated from each optimizer's `option_keys()` (the
facade's names, `muon` with `ns_steps=auto`, and compositions with the policies no preset uses) by
`tests/docs/option_keys.cpp` and `scripts/options_table.py`; the test `docs.options_table` fails when this page
differs from what they render. The other columns are written by hand, in the script. A key an optimizer knows can still be
refused for its value or its combination with other options, with a message naming both.

| key | known to | values; default | meaning |
|---|---|---|---|
{chr(10).join(rows)}

## Keys per optimizer

In the order `option_keys()` lists them:

| optimizer | keys |
|---|---|
{chr(10).join(per)}
"""
Path(sys.argv[2]).write_text(page)
print("wrote", sys.argv[2], len(all_keys), "keys")
