#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Renders docs/options.md from the output of tests/docs/option_keys.cpp: the optimizers' option descriptors, one line
per option: label TAB key TAB values TAB default TAB doc (include/matopt/core/options.hpp).

Usage: scripts/options_table.py OPTIONS_FILE OUT_MD. The CTest docs.options_table renders it anew and compares it with
the committed docs/options.md; after an option is added or changed, run the option_keys program of the library build
and this script:
  build/tests/matopt_option_keys > options.txt && python3 scripts/options_table.py options.txt docs/options.md
Everything in the tables comes from the descriptors except each key's link to its entry in the docs and the notes
below (where an option is refused in combination), which are written here.
"""
import sys
from collections import OrderedDict
from pathlib import Path

options_of = OrderedDict()  # label -> OrderedDict(key -> (values, default, doc))
for line in Path(sys.argv[1]).read_text().strip().split("\n"):
    label, key, values, default, doc = line.split("\t")
    options_of.setdefault(label, OrderedDict())[key] = (values, default, doc)
order = list(options_of)
presets = [l for l in order if "composition" not in l]
matrix = [l for l in presets if l not in ("adamw", "lion")]

# key -> the entry in the docs that explains it
LINK = {
    "lr": "optimizers.md#shared-options", "momentum": "optimizers.md#shared-options",
    "nesterov": "optimizers.md#shared-options", "weight_decay": "optimizers.md#shared-options",
    "non_finite": "api.md#non-finite-gradients",
    "ns_schedule": "policies.md#schedules", "ns_steps": "policies.md#newtonschulz", "ns_safety": "policies.md#newtonschulz",
    "ns_eps": "policies.md#newtonschulz", "ns_aol": "policies.md#newtonschulz", "ns_variant": "policies.md#newtonschulz",
    "gram_aspect": "policies.md#newtonschulz", "ns_dtype": "math.md#newton-schulz-in-bfloat16",
    "heads": "optimizers.md#row-blocks-heads-and-split_sizes",
    "split_sizes": "optimizers.md#row-blocks-heads-and-split_sizes",
    "split_groups": "optimizers.md#row-blocks-heads-and-split_sizes",
    "norm_eps": "policies.md#rownormalize", "clip_min": "policies.md#trustratio", "clip_max": "policies.md#trustratio",
    "trust_eps": "policies.md#trustratio", "calibrate": "policies.md#trustratio",
    "trust_coefficient": "policies.md#trustratio", "beta1": "optimizers/adamw.md", "beta2": "policies.md#secondmoment",
    "eps": "optimizers/adamw.md", "moment_eps": "policies.md#secondmoment", "normuon_axis": "policies.md#secondmoment",
    "rms_target": "policies.md#secondmoment", "mu": "policies.md#dionpoweriteration",
    "rank_fraction": "policies.md#dionpoweriteration", "rank_multiple_of": "policies.md#dionpoweriteration",
    "dion_eps": "policies.md#dionpoweriteration", "ns_plan_every": "policies.md#autosteps",
    "ns_plan_quantile": "policies.md#autosteps", "ns_plan_tau": "policies.md#autosteps",
    "ns_plan_max_steps": "policies.md#autosteps", "lr_rule": "policies.md#step-rules",
    "extra_scale_factor": "policies.md#step-rules", "weight_decay_method": "policies.md#step-rules",
    "cautious_weight_decay": "policies.md#step-rules", "adaptive_threshold": "policies.md#adaptive",
    "adaptive_every": "policies.md#adaptive", "cap_threshold": "policies.md#spectralcap",
    "cap_power_iterations": "policies.md#spectralcap", "cap_initial_iterations": "policies.md#spectralcap",
}
# Where an accepted key is refused in combination (the descriptors' rules say so in their messages).
NOTE = {
    "momentum": "refused by Dion, whose momentum is `mu`",
    "nesterov": "refused by Dion",
    "ns_schedule": "applied before the other keys",
    "ns_aol": "refused by `muon` with `ns_steps=auto`",
    "ns_dtype": "`bfloat16` needs a build with oneDNN; host only",
    "heads": "refused by OrScale and PolarGrad (at `step`) and by `muon` with `ns_steps=auto`",
    "split_sizes": "refused as `heads` is",
    "split_groups": "refused as `heads` is",
    "weight_decay_method": "OrScale: `decoupled` only",
}

all_keys = []
for l in order:
    for k in options_of[l]:
        if k not in all_keys:
            all_keys.append(k)
missing = [k for k in all_keys if k not in LINK]
if missing:
    sys.exit(f"render: no link for {missing}")


def who(labels):
    """Optimizers by name, compositions by their policy."""
    names = [l for l in labels if l in presets]
    comps = [l.replace(" composition", "") for l in labels if "composition" in l]
    if names and set(names) == set(matrix):
        s = "every matrix preset"
    elif names and set(names) <= set(matrix) and len(set(matrix) - set(names)) == 1:
        s = f"every matrix preset but `{(set(matrix) - set(names)).pop()}`"
    elif names and set(names) == set(presets):
        s = "every optimizer"
    else:
        s = ", ".join(f"`{n}`" if " " not in n else "`muon` with `ns_steps=auto`" for n in names)
    if comps:
        s = (s + "; " if s else "") + "compositions with " + ", ".join(f"`{c}`" for c in comps)
    return s


def knowing(k):
    """Presets that know k; compositions only where no preset does."""
    names = [l for l in presets if k in options_of[l]]
    return names or [l for l in order if k in options_of[l]]


def names_text(values):
    """An enum's names in code font; numbers' and booleans' ranges as they are."""
    if values.split(" ")[0] in ("number", "integer", "boolean", "comma-separated"):
        return values.replace(">=", "≥").replace("<=", "≤").replace(", or auto", ", or `auto`")
    return ", ".join(f"`{v}`" for v in values.split(", "))


def grouped(k, field):
    """One text when every optimizer that knows k agrees, else each text with the optimizers it holds for."""
    groups = OrderedDict()
    for l in knowing(k):
        groups.setdefault(options_of[l][k][field], []).append(l)
    if len(groups) == 1:
        return next(iter(groups))
    return groups


def default_text(k):
    g = grouped(k, 1)
    show = lambda v: f"`{v}`" if v else "empty"
    if isinstance(g, str):
        return show(g)
    if len(g) > 4:
        return "the preset's"
    common = max(g, key=lambda v: len(g[v]))
    rest = "; ".join(f"{who(ls)} {show(v)}" for v, ls in g.items() if v != common)
    return f"{show(common)} ({rest})"


def merged(k, field, fmt):
    """The text most optimizers that know k agree on, then the others' in parentheses."""
    g = grouped(k, field)
    if isinstance(g, str):
        return fmt(g)
    common = max(g, key=lambda v: len(g[v]))
    rest = "; ".join(f"{who(ls)}: {fmt(v)}" for v, ls in g.items() if v != common)
    return f"{fmt(common)} ({rest})"


def cell(text):
    """Text for a table cell: a '|' of the text (a norm's bars) would end the cell."""
    return text.replace("|", "\\|")


rows = []
for k in all_keys:
    values = merged(k, 0, names_text)
    meaning = merged(k, 2, cell)
    if k in NOTE:
        meaning += f" ({NOTE[k]})"
    rows.append(f"| `{k}` | {who([l for l in order if k in options_of[l] and (l in presets or not any(k in options_of[p] for p in presets))])} "
                f"| {values}; {default_text(k)} | {meaning} ([entry]({LINK[k]})) |")

per = []
for l in order:
    if "composition" in l:
        name = "`" + l.replace(" composition", "") + "` (a composition)"
    elif " " in l:
        name = "`muon` with `ns_steps=auto`"
    else:
        name = f"`{l}`"
    per.append(f"| {name} | {', '.join(f'`{k}`' for k in options_of[l])} |")

page = f"""# Option keys

Every text option key, in one table: what `make_optimizer<T>(name, {{{{key, value}}, …}})`, `AnyOptimizer::set(key,
value)`, `TorchOptimizer`'s config and `HybridOptimizer`'s routes accept. Each key sets one field of a typed
optimizer's `Options` ([api.md](api.md#run-time-facade) for values as text and error messages; the linked entries for
each field). Unknown keys, and keys an optimizer does not take, are refused with the list of the keys it knows.

Each policy declares each of its options once, as a descriptor (key, field, check, one line of doc;
`include/matopt/core/options.hpp`, [extending.md](extending.md#options-declared-once)): the text setter, the key
lists, the validation and this page all come from it. The tables are rendered from the descriptors of the facade's
names, `muon` with `ns_steps=auto` and compositions with the policies no preset uses (`tests/docs/option_keys.cpp`,
`scripts/options_table.py`; the test `docs.options_table` fails when this page differs from what they render); only
the links and the notes on combinations are written by hand, in the script. `AnyOptimizer::option_info()` lists the
same for an optimizer at run time, with its current values. A key an optimizer knows can still be refused for its
value or its combination with other options, with a message naming both.

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
