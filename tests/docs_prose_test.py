#!/usr/bin/env python3
"""The prose of the documents, docstrings and headers against the code (docs/doc-examples.md, "Prose").

The examples of the documents are executed (scripts/doc-examples.py); their prose is checked here: every scope,
mode and preset name in the places below is compared with what the code says (build/bin/policy_facts prints
it: DispatchPolicy's scopes, modes and their rules, the layer presets), so that a renamed or new scope, or a mode
whose rules change, fails this test until the prose follows. The checks:

  names        a word used as a scope ("X scope", scope="X", "X" scope), a mode (--mode X, "X" mode) or a
               layer preset ("the X preset") is one the code has
  lists        a list of scopes ("a", "b" and "c"; a | b | c; a, b and c scopes) is one of the sets the code
               defines: every scope, those that carry a routing state, those that need each request admitted,
               those with per-request pools - so a new scope, or one left out, shows
  claims       what the prose says the stable mode's (the deterministic preset's) scope is, is its scope
  tables       docs/cli.md's policy rows are generated from the modes and scopes; docs/divergence.md's table
               of the lab's modes gives each its scope and priority
  numbers      the stable drop rate docs/cli.md quotes and docs/routing.md's peak-load paragraph are rerun

A self-check runs the checks on altered facts (a new scope, the stable mode on another scope) and altered
prose, which must fail.

Usage: docs_prose_test.py BUILD_DIR
"""

import json
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = None

# The places whose prose names scopes, modes and presets (issue 37's list, and the documents beside them).
PLACES = [
    "README.md",
    "docs/cli.md",
    "docs/embedding.md",
    "docs/divergence.md",
    "docs/routing.md",
    "docs/runtime.md",
    "docs/determinism.md",
    "python/moe/__init__.py",
    "python/moe/torch_module.py",
    "moe/api/moe_c.h",
]

# Words that stand before "scope" in English prose without naming one ("the per-request scopes", "each scope").
NOT_SCOPE_NAMES = {
    "a", "an", "any", "capacity", "each", "every", "its", "no", "one", "other", "same", "stateful", "that",
    "the", "their", "this", "which", "whose", "per-request", "of", "chunking-proof", "own", "narrower",
    "wider", "all", "new", "both", "these", "those", "and", "or", "in", "under", "by", "for", "to", "from",
    "with", "their", "another", "some", "what", "more", "stateless", "invariant",
}
# Words before "mode" that are no dispatch mode ("the debug mode", "varied mode").
NOT_MODE_NAMES = {"a", "the", "dispatch", "each", "every", "this", "that", "its", "one", "named", "any", "other",
                  "kernel", "deterministic", "dropless", "debug", "JSON", "json", "watch", "compute", "strict"}


def load_facts():
    out = subprocess.run([os.path.join(BUILD, "bin", "policy_facts")], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def read(rel):
    """The file's prose: a Markdown file without its fenced blocks (examples and code, which the doc-examples
    tests run or which name things as the code does), blanked so that line numbers stay."""
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        text = f.read()
    if not rel.endswith(".md"):
        return text
    out, fenced = [], False
    for line in text.split("\n"):
        if re.match(r"^\s*```", line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


class Checker:
    """The checks of one set of facts over texts; `errors` lists (place, line, message)."""

    def __init__(self, facts):
        self.facts = facts
        self.scopes = list(facts["scopes"])
        self.sets = {"every scope": set(self.scopes)}
        for name, members in facts["scope_sets"].items():
            self.sets[name] = set(members)
        self.modes = {m["name"]: m for m in facts["modes"]}
        self.lab_modes = {m["name"]: m for m in facts["lab_modes"]}
        self.presets = {p["name"]: p for p in facts["presets"]}
        self.router_presets = set(facts["router_presets"])
        self.stable_scope = self.modes["stable"]["scope"]
        self.errors = []

    def error(self, place, text, pos, message):
        self.errors.append((place, line_of(text, pos), message))

    # names ------------------------------------------------------------------------------------------------
    def check_names(self, place, text):
        word = r"([A-Za-z][\w-]*)"
        patterns = [
            r"(?<![\w'-])[\"`]?" + word + r"[\"`]? (?:capacity )?scopes?\b(?!\s*=)",  # "X scope", `X` scope
            r"\bscope\s*=\s*[\"'`]" + word,  # scope="X"
            r"--scope[ =]" + word,  # --scope X
            r"\bscope [\"`]" + word + r"[\"`]",  # scope `X`
        ]
        for pattern in patterns:
            for m in re.finditer(pattern, text):
                name = m.group(1)
                if name.lower() in self.scopes or name.lower() in NOT_SCOPE_NAMES:
                    continue
                self.error(place, text, m.start(1), "'%s' is not a scope (the code's: %s)" %
                           (name, ", ".join(self.scopes)))
        for m in re.finditer(r"--mode[ =]([A-Za-z][\w-]*)|[\"`]([A-Za-z][\w-]*)[\"`] mode\b", text):
            name = m.group(1) or m.group(2)
            if name in self.modes or name in self.lab_modes or name in NOT_MODE_NAMES:
                continue
            self.error(place, text, m.start(), "'%s' is not a dispatch mode (the code's: %s; the lab's: %s)" %
                       (name, ", ".join(self.modes), ", ".join(self.lab_modes)))
        for m in re.finditer(r"\bthe [\"`]?([A-Za-z][\w-]*)[\"`]? preset\b", text):
            name = m.group(1)
            if name in self.presets or name.lower() in self.router_presets or name in ("router", "layer", "same"):
                continue
            self.error(place, text, m.start(1), "'%s' is not a layer preset (the code's: %s)" %
                       (name, ", ".join(self.presets)))

    # lists ------------------------------------------------------------------------------------------------
    def check_lists(self, place, text):
        item = r"[\"`]([A-Za-z][\w-]*)[\"`](?:\s+scopes?)?"
        sep = r"(?:\s*\([^()\"`]*(?:[\"`][^()\"`]*[\"`][^()\"`]*)*\))?\s*(?:[,|/]\s*(?:\(?(?:or|and)\s+)?|\(?\s*(?:or|and)\s+|\(\s*)"
        run = re.compile(item + r"(?:" + sep + item + r")+")
        for m in run.finditer(text):
            # The list's items, not what its parenthetical remarks quote ("`prefix` (the `stable` mode), ...").
            items = re.findall(item, re.sub(r"\([^()]*\)", "", m.group(0)))
            known = [i for i in items if i in self.scopes]
            if len(known) < 2 or len(known) * 2 < len(items):
                continue  # a list of something else (priorities, JSON keys, kernels)
            self.check_set(place, text, m.start(), items)
        # Bare: "a, b and c scopes" - the words before "scopes" that name scopes (a leading word that does not,
        # such as "priority" in "request priority, causal and sequence scopes", ends the list; the last one
        # must be a scope: "X scopes" names X as one).
        bare = re.compile(r"\b([a-z][\w-]*)((?:, [a-z][\w-]*)*),? (?:and|or) ([a-z][\w-]*) scopes\b")
        for m in bare.finditer(text):
            items = [m.group(1)] + [w.strip() for w in m.group(2).split(",") if w.strip()] + [m.group(3)]
            while items and items[0] not in self.scopes and len(items) > 1:
                items.pop(0)
            if len(items) >= 2:
                self.check_set(place, text, m.start(), items)

    def check_set(self, place, text, pos, items):
        unknown = [i for i in items if i not in self.scopes]
        if unknown:
            self.error(place, text, pos, "list of scopes %s names %s, not a scope" % (items, unknown))
            return
        if set(items) not in self.sets.values():
            self.error(place, text, pos, "list of scopes %s is none of the code's sets: %s" % (
                items, "; ".join("%s = %s" % (k, sorted(v)) for k, v in self.sets.items())))

    # claims -----------------------------------------------------------------------------------------------
    CLAIMS = [
        r"stable`? mode is [\"`]?([A-Za-z][\w-]*)[\"`]? scope",
        r"deterministic`?\"? preset(?:'s scope)? is [\"`]?([A-Za-z][\w-]*)",
        r"[\"`]?([A-Za-z][\w-]*)[\"`]? (?:capacity )?scope,? \((?:the )?[\"`]?(?:stable|deterministic)",
        r"[\"`]([A-Za-z][\w-]*)[\"`] \((?:the )?[\"`]?(?:stable|deterministic)[\"`]? (?:mode|preset|dispatch)",
        r"[\"`]([A-Za-z][\w-]*)[\"`] scope \((?:the )?[\"`]?(?:stable|deterministic)",
        r"\(([A-Za-z][\w-]*) scope, the deterministic preset",
        r"`stable` \(([A-Za-z][\w-]*), [a-z]+\)",
        r"\| `stable` \| ([A-Za-z][\w-]*)",
        r"`stable` dispatch \(([A-Za-z][\w-]*) capacity scope",
        r"stable \(([A-Za-z][\w-]*) scope",
    ]

    def check_claims(self, place, text):
        for pattern in self.CLAIMS:
            for m in re.finditer(pattern, text):
                said = m.group(1).lower()
                if said in self.modes or said in self.presets:
                    continue  # "the deterministic preset is `stable` dispatch": a mode, not a scope
                if said != self.stable_scope:
                    self.error(place, text, m.start(1), "says the stable mode / deterministic preset is '%s' "
                               "scope; the code's is '%s'" % (m.group(1), self.stable_scope))

    # tables -----------------------------------------------------------------------------------------------
    def check_cli_tables(self, text):
        mode_row = "| policy | `--mode` | %s | greedy |" % ", ".join(
            "`%s` (%s, %s)" % (m["name"], m["scope"], m["priority"]) for m in self.facts["modes"])
        scope_row = "| | `--scope` | %s | from mode |" % ", ".join("`%s`" % s for s in self.scopes)
        for row in (mode_row, scope_row):
            if row not in text.splitlines():
                self.error("docs/cli.md", text, 0, "the policy table lacks the row the code gives: " + row)

    def check_lab_table(self, text):
        """docs/divergence.md's table of the lab's modes: each row's scope and priority are the mode's."""
        rows = re.findall(r"^\| `([a-z-]+)` \| ([a-z]+)[^|]*\| ([a-z-]+)[^|]*\|", text, re.M)
        named = [name for name, _, _ in rows if name in self.lab_modes]
        if sorted(named) != sorted(self.lab_modes):
            self.error("docs/divergence.md", text, 0, "the table of the lab's modes has %s; the code's are %s" %
                       (named, list(self.lab_modes)))
        for name, scope, priority in rows:
            if name not in self.lab_modes:
                continue
            mode = self.lab_modes[name]
            want = (mode["scope"], "-" if mode["scope"] == "none" else mode["priority"])
            if (scope, priority) != want:
                self.error("docs/divergence.md", text, text.find("| `%s` |" % name),
                           "the lab's mode %s is %s scope, %s priority; the table says %s, %s" %
                           (name, want[0], want[1], scope, priority))

    def check(self, texts):
        for place, text in texts.items():
            self.check_names(place, text)
            self.check_lists(place, text)
            self.check_claims(place, text)
        if "docs/cli.md" in texts:
            self.check_cli_tables(texts["docs/cli.md"])
        if "docs/divergence.md" in texts:
            self.check_lab_table(texts["docs/divergence.md"])
        return self.errors


def report(errors):
    return "\n".join("%s:%d: %s" % e for e in errors)


class Prose(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.facts = load_facts()
        cls.texts = {place: read(place) for place in PLACES}

    def test_the_prose_names_what_the_code_has(self):
        errors = Checker(self.facts).check(self.texts)
        self.assertEqual(errors, [], "\n" + report(errors))

    def test_a_new_or_renamed_scope_fails_until_the_prose_follows(self):
        # A new stateful scope: every list of stateful scopes (and of all scopes) now misses it.
        facts = json.loads(json.dumps(self.facts))
        facts["scopes"].append("window")
        facts["scope_sets"]["stateful"].append("window")
        errors = Checker(facts).check(self.texts)
        self.assertTrue(any("none of the code's sets" in e[2] for e in errors), report(errors))
        self.assertTrue(any("policy table lacks" in e[2] for e in errors), report(errors))
        # A renamed scope: the prose's old name is no scope.
        facts = json.loads(json.dumps(self.facts))
        facts["scopes"] = ["horizon" if s == "prefix" else s for s in facts["scopes"]]
        for members in facts["scope_sets"].values():
            members[:] = ["horizon" if s == "prefix" else s for s in members]
        for m in facts["modes"]:
            m["scope"] = "horizon" if m["scope"] == "prefix" else m["scope"]
        errors = Checker(facts).check(self.texts)
        self.assertTrue(any("'prefix' is not a scope" in e[2] for e in errors), report(errors))

    def test_the_stable_modes_scope_is_checked(self):
        facts = json.loads(json.dumps(self.facts))
        for m in facts["modes"]:
            if m["name"] == "stable":
                m["scope"] = "sequence"
        errors = Checker(facts).check(self.texts)
        self.assertTrue(any("stable mode / deterministic preset is 'prefix'" in e[2] for e in errors),
                        report(errors))
        # Prose that drifted back: each phrasing the issue found.
        for drifted in ["The stable mode is sequence scope: each request gets",
                        'carry state across calls: `sequence` and `causal`.',
                        'pass scope="sequence" (or "request"/"causal") and capacity_factor',
                        "| policy | `--mode` | `greedy` (batch, arrival), `stable` (request, request) | greedy |",
                        'under scopes "sequence" (the deterministic preset: admit every request first) and '
                        '"causal"']:
            errors = Checker(self.facts).check({"drifted.md": drifted})
            self.assertTrue(errors, "not caught: " + drifted)

    def test_quoted_numbers_are_the_codes(self):
        sim = os.path.join(BUILD, "bin", "moe-sim")
        # docs/cli.md: the drop rates at cf 1.25 of one static batch (seed 0) of the calibrated Mixtral scores.
        cli = self.texts["docs/cli.md"]
        m = re.search(r"\| ([0-9.]+) % greedy, ([0-9.]+) % stable \(one static batch, seed 0\) \|", cli)
        self.assertIsNotNone(m, "docs/cli.md: the quoted drop rates are gone")
        out = json.loads(subprocess.run(
            [sim, "sweep", "--preset", "mixtral", "--requests", "200", "--scores", "mixtral-8x7b",
             "--modes", "greedy,stable", "--capacity-factors", "1.25", "--json", "--quiet"],
            check=True, capture_output=True, text=True).stdout)
        rates = {p["mode"]: p["drop_rate"] for p in out["points"]}
        self.assertEqual(m.group(1), "%.2f" % (100 * rates["greedy"]))
        self.assertEqual(m.group(2), "%.1f" % (100 * rates["stable"]))
        # docs/routing.md: the busiest expert's mean load against cf*T*k/E per scope, serving.toml at cf 1.25.
        routing = self.texts["docs/routing.md"]
        m = re.search(r"On `sim/scenarios/serving.toml` \(mode stable\) at cf 1.25 the mean over steps is (.*?);",
                      routing, re.S)
        self.assertIsNotNone(m, "docs/routing.md: the peak-load paragraph is gone")
        quoted = re.findall(r"([0-9]+\.[0-9]+)\s+for\s+(?:`)?([a-z]+)", m.group(1))
        gaussian = re.search(r"with `--scores gaussian`: ([0-9., ]+)\)", m.group(1))
        self.assertTrue(quoted and gaussian, m.group(1))
        scopes = [s for _, s in quoted]
        self.assertEqual(sorted(scopes), sorted(set(scopes)))
        for scores, values in (("mixtral-8x7b", [v for v, _ in quoted]),
                               ("gaussian", [v.strip() for v in gaussian.group(1).split(",")])):
            out = json.loads(subprocess.run(
                [sim, "sweep", "--scenario", os.path.join(ROOT, "sim/scenarios/serving.toml"), "--modes", "stable", "--scopes",
                 ",".join(scopes), "--capacity-factors", "1.25", "--scores", scores, "--json", "--quiet"],
                check=True, capture_output=True, text=True).stdout)
            means = {p["scope"]: p["per_step"]["peak_load_vs_nominal_mean"] for p in out["points"]}
            self.assertEqual(values, ["%.2f" % means[s] for s in scopes], scores)


if __name__ == "__main__":
    BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    unittest.main()
