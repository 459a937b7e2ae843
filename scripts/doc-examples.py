#!/usr/bin/env python3
"""Runs the shell examples of Markdown files and checks their documented output (docs/doc-examples.md).

An example is a fenced code block without a language whose first non-blank line starts with "$ ": each "$ " line
is a command, the lines after it (up to the next "$ " line) its expected output, stdout and stderr together. The
commands of one file run in document order in one bash session (so `cd`, `export` and files written by an earlier
example carry over), in a fresh work directory that links the build, the models and the source folders the
examples name. Expected output may use:

  ...              on a line of its own (indentation allowed): any number of lines, none included
  TEXT...          a line cut short: the real line starts with TEXT
  {{time}}         a number (a duration or rate that changes from run to run)
  {{any}}          any text within one line (a machine's memory size, a path)
  (exit status N)  the last line of a command's output: its exit status (default: 0, which must hold)

HTML comments direct the runner (invisible when the Markdown is rendered):

  <!-- doc-examples: setup -->     the next fenced block is run (not shown as an example, output not checked;
                                   it must exit 0)
  <!-- doc-examples: setup
  commands ...
  -->                              hidden set-up commands, run at this point
  <!-- doc-examples: heavy -->     the next example is run only with --heavy (expensive)
  <!-- doc-examples: run CMD -->   the next fenced block (any language) is a program: written to a file F and
                                   run as `CMD F`; the fenced block after it is its expected output

Usage: scripts/doc-examples.py [--build DIR] [--update] [--heavy] [--keep] FILE.md ...
  --update   rewrite the expected output of every example whose output changed, from the real run, keeping its
             cuts and placeholders where the new output still fits them (the developer's re-baseline)
  --heavy    also run the examples marked heavy
Exit status: 0 when every example matched (or was updated), 1 when one differed, 2 for a usage error.
"""

import argparse
import difflib
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Folders of the source tree that examples name by relative path (linked into the work directory).
LINKED = ["models", "sim", "tests", "python", "scripts", "data", "docs", "fuzz", "bench"]
PLACEHOLDERS = {
    "time": r"[0-9]+(?:\.[0-9]+)?",
    "any": r".*?",
}
FENCE = re.compile(r"^(\s*)(```+)\s*(\S*)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*doc-examples:\s*(\w[\w-]*)\s*(.*?)\s*(-->)?\s*$")
EXIT = re.compile(r"^\(exit status (\d+)\)$")
ELLIPSIS = "..."


class Command:
    def __init__(self, file, line, text):
        self.file = file
        self.line = line  # 1-based line of the "$ " line
        self.text = text
        self.expected = []  # pattern lines
        self.status = 0
        self.explicit_status = False  # "(exit status 0)" written out
        self.heavy = False
        self.program = None  # the program text of a `run` directive's block (its file is the command's last word)
        self.actual = None  # output lines after the run
        self.actual_status = None


class Block:
    """A fenced block: its place in the file, its indentation, and its commands (or a set-up script)."""

    def __init__(self, start, end, indent):
        self.start = start  # index of the opening fence line
        self.end = end  # index of the closing fence line
        self.indent = indent
        self.commands = []
        self.setup = None  # set-up script text
        self.heavy = False
        self.output_only = False  # the output block of a `run` directive's program (no "$ " line)


def fenced_block(path, lines, i):
    """The fenced block that opens at lines[i] (None if that line is no fence): (indent, language, index of the
    closing fence, body lines with the block's indentation removed)."""
    m = FENCE.match(lines[i])
    if not m:
        return None
    indent, fence, lang = m.group(1), m.group(2), m.group(3)
    j = i + 1
    while j < len(lines) and not (lines[j].strip() == fence and lines[j].startswith(indent)):
        j += 1
    if j == len(lines):
        raise SystemExit("%s:%d: unterminated code block" % (path, i + 1))
    return indent, lang, j, [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:j]]


def parse(path):
    """The blocks of a Markdown file, in order: examples, visible set-up blocks and hidden set-up comments."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    pending = {}
    i = 0
    while i < len(lines):
        d = DIRECTIVE.match(lines[i])
        if d:
            name = d.group(1)
            if name not in ("setup", "heavy", "run"):
                raise SystemExit("%s:%d: unknown doc-examples directive '%s'" % (path, i + 1, name))
            if name == "setup" and not d.group(3):
                # A hidden set-up script: the comment's lines up to "-->".
                j = i + 1
                while j < len(lines) and lines[j].strip() != "-->":
                    j += 1
                if j == len(lines):
                    raise SystemExit("%s:%d: unterminated doc-examples set-up comment" % (path, i + 1))
                b = Block(i, j, "")
                b.setup = "\n".join(lines[i + 1:j])
                blocks.append(b)
                i = j + 1
                continue
            if name == "run" and not d.group(2):
                raise SystemExit("%s:%d: 'run' needs the command that runs the program" % (path, i + 1))
            pending[name] = d.group(2)
            i += 1
            continue
        block = fenced_block(path, lines, i)
        if block is None:
            i += 1
            continue
        indent, lang, j, body = block
        b = Block(i, j, indent)
        if "run" in pending:
            # The program, then its output block: the next fenced block, with only blank lines between.
            k = j + 1
            while k < len(lines) and not lines[k].strip():
                k += 1
            out = fenced_block(path, lines, k) if k < len(lines) else None
            if out is None or out[1]:
                raise SystemExit("%s:%d: a 'run' program needs its output in a plain fenced block right after it"
                                 % (path, i + 1))
            o_indent, _, e, o_body = out
            cmd = Command(path, i + 1, "%s .doc-examples-program-%d" % (pending["run"], i + 1))
            cmd.program = "\n".join(body)
            cmd.heavy = "heavy" in pending
            cmd.expected = [l.rstrip() for l in o_body]
            finish_expected(cmd)
            b = Block(k, e, o_indent)
            b.output_only = True
            b.heavy = cmd.heavy
            b.commands.append(cmd)
            blocks.append(b)
            pending = {}
            i = e + 1
            continue
        if "setup" in pending:
            b.setup = "\n".join(body)
            blocks.append(b)
        elif not lang:
            first = next((l for l in body if l.strip()), "")
            if first.startswith("$ "):
                b.heavy = "heavy" in pending
                cmd = None
                for k, l in enumerate(body):
                    if l.startswith("$ "):
                        cmd = Command(path, i + 2 + k, l[2:])
                        cmd.heavy = b.heavy
                        b.commands.append(cmd)
                    elif cmd is not None:
                        cmd.expected.append(l.rstrip())
                for c in b.commands:
                    finish_expected(c)
                blocks.append(b)
        pending = {}
        i = j + 1
    return lines, blocks


def finish_expected(c):
    """Trailing blank lines dropped; a last "(exit status N)" line taken as the expected status."""
    while c.expected and not c.expected[-1]:
        c.expected.pop()
    if c.expected:
        e = EXIT.match(c.expected[-1])
        if e:
            c.status = int(e.group(1))
            c.explicit_status = True
            c.expected.pop()


def split_pattern(pattern):
    """An expected line's parts: whether it is cut short (a trailing "..."), and its text split into literal
    text (even indices) and placeholder names (odd indices), every name checked."""
    cut = pattern.endswith(ELLIPSIS) and pattern.strip() != ELLIPSIS
    parts = re.split(r"\{\{(\w+)\}\}", pattern[: -len(ELLIPSIS)] if cut else pattern)
    for name in parts[1::2]:
        if name not in PLACEHOLDERS:
            raise SystemExit("unknown placeholder {{%s}} in '%s' (known: %s)" % (name, pattern, ", ".join(PLACEHOLDERS)))
    return cut, parts


def line_regex(pattern):
    """The regular expression of one expected line (placeholders, a trailing cut), or None for a literal line."""
    cut, parts = split_pattern(pattern)
    if len(parts) == 1 and not cut:
        return None
    rx = "".join(PLACEHOLDERS[part] if n % 2 else re.escape(part) for n, part in enumerate(parts))
    return re.compile(rx + ("" if cut else r"\Z"))


def line_matches(pattern, actual, loose=False):
    if loose:
        # Shape only: digits may differ (used to align changed output with its cuts in --update).
        pattern, actual = re.sub(r"[0-9]", "0", pattern), re.sub(r"[0-9]", "0", actual)
    rx = line_regex(pattern)
    if rx is None:
        return pattern == actual
    return rx.match(actual) is not None


def align(expected, actual, loose=False):
    """The actual line range each expected line matched ((start, end) per pattern line; an elision may take
    any number of lines), or None when the output does not match."""

    @functools.lru_cache(maxsize=None)
    def go(i, j):
        if i == len(expected):
            return () if j == len(actual) else None
        if expected[i].strip() == ELLIPSIS:
            for k in range(j, len(actual) + 1):
                rest = go(i + 1, k)
                if rest is not None:
                    return ((j, k),) + rest
            return None
        if j < len(actual) and line_matches(expected[i], actual[j], loose):
            rest = go(i + 1, j + 1)
            if rest is not None:
                return ((j, j + 1),) + rest
        return None

    sys.setrecursionlimit(max(10000, 4 * (len(expected) + len(actual))))
    return go(0, 0)


def refit(pattern, actual):
    """The pattern line with its literal text taken from the actual line and its placeholders (and a trailing cut)
    kept, when the two differ only in numbers of the literal text; else None."""
    cut, parts = split_pattern(pattern)
    if len(parts) == 1 and not cut:
        return None

    def loose(text):  # the literal text with its numbers free
        return "".join("[0-9]+" if t.isdigit() else re.escape(t) for t in re.split(r"([0-9]+)", text))

    rx = "".join("(" + (PLACEHOLDERS[part] if n % 2 else loose(part)) + ")" for n, part in enumerate(parts))
    m = re.compile(rx + ("" if cut else r"\Z")).match(actual)
    if m is None:
        return None
    return "".join("{{%s}}" % part if n % 2 else m.group(n + 1) for n, part in enumerate(parts)) + (
        ELLIPSIS if cut else "")


def rebaseline(cmd):
    """New expected lines for a command whose output changed: its cuts, elisions and placeholders kept where
    the new output still fits them, else the whole output (with a warning)."""
    exp, act = cmd.expected, cmd.actual
    spans = align(exp, act, loose=True)
    new = []
    if spans is not None:
        for pattern, (a, b) in zip(exp, spans):
            if pattern.strip() == ELLIPSIS:
                new.append(pattern)
            elif line_matches(pattern, act[a]):
                new.append(pattern)
            elif pattern.endswith(ELLIPSIS):
                keep = len(pattern) - len(ELLIPSIS)
                new.append(act[a][:keep] + ELLIPSIS if len(act[a]) > keep else act[a])
            else:
                kept = refit(pattern, act[a])
                if kept is None:
                    if "{{" in pattern:
                        warn(cmd, "a placeholder no longer fits its line; the line is now literal: check it")
                    kept = act[a]
                new.append(kept)
    else:
        head = 0
        while head < len(exp) and exp[head].strip() != ELLIPSIS:
            head += 1
        if head == len(exp):
            new = list(act)
        else:
            tail = 0
            while tail < len(exp) and exp[len(exp) - 1 - tail].strip() != ELLIPSIS:
                tail += 1
            new = act[:head] + [exp[head]] + (act[len(act) - tail:] if tail else [])
        warn(cmd, "the output changed shape; rewritten from the real run: check its cuts and elisions")
    if cmd.actual_status != 0 or cmd.explicit_status:
        new.append("(exit status %d)" % cmd.actual_status)
    return new


def documented(cmd):
    """A command's expected lines as written (with its exit status line)."""
    return cmd.expected + (["(exit status %d)" % cmd.status] if cmd.explicit_status else [])


def shown(path):
    """A path as messages show it: relative to the working directory when inside it, else as given."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def warn(cmd, what):
    print("%s:%d: %s" % (shown(cmd.file), cmd.line, what), file=sys.stderr)


def make_workdir(base, build):
    os.makedirs(base)
    os.symlink(os.path.abspath(build), os.path.join(base, "build"))
    for name in LINKED:
        if os.path.exists(os.path.join(ROOT, name)):
            os.symlink(os.path.join(ROOT, name), os.path.join(base, name))
    return base


def run_file(path, blocks, build, heavy, workdir):
    """Runs the file's set-up blocks and examples in one bash session; fills each command's actual output."""
    marker = "@@doc-examples-%d@@" % os.getpid()
    script = ["exec 2>&1", "cd %s" % shlex_quote(workdir)]
    todo = []
    for b in blocks:
        if b.setup is not None:
            n = len(todo)
            todo.append(None)
            script.append("echo '%s begin %d'" % (marker, n))
            script.append("( set -e\n%s\n) > .doc-examples-setup.log 2>&1; __s=$?" % b.setup)
            script.append("[ $__s -eq 0 ] || cat .doc-examples-setup.log")
            script.append("echo \"%s end %d $__s\"" % (marker, n))
            continue
        for c in b.commands:
            if c.heavy and not heavy:
                continue
            n = len(todo)
            todo.append(c)
            if c.program is not None:
                script.append("cat > %s <<'%s'\n%s\n%s" % (c.text.split()[-1], marker, c.program, marker))
            script.append("echo '%s begin %d'" % (marker, n))
            script.append(c.text)
            script.append("echo \"%s end %d $?\"" % (marker, n))
    # A user's plain environment: the build's programs first, then the system's (Debian's python3 with numpy),
    # a home and a cache of the work directory's own (what diverge prepares stays there).
    env = {
        "PATH": os.pathsep.join([os.path.join(os.path.abspath(build), "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": os.path.join(workdir, ".home"),
        "XDG_CACHE_HOME": os.path.join(workdir, ".cache"),
        "LC_ALL": "C",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }
    # The session reads its commands from a file, and its stdin is empty: a command that reads stdin (mpirun
    # forwards it to rank 0) then cannot swallow the rest of the document.
    session = os.path.join(workdir, ".doc-examples-session.sh")
    with open(session, "w", encoding="utf-8") as f:
        f.write("\n".join(script) + "\n")
    proc = subprocess.run(["bash", "--noprofile", "--norc", session], stdin=subprocess.DEVNULL, text=True,
                          stdout=subprocess.PIPE, env=env, cwd=workdir)
    current, out = None, []
    ok = True
    seen = set()
    for line in proc.stdout.split("\n"):
        if line.startswith(marker + " begin "):
            current, out = int(line.split()[2]), []
            continue
        if line.startswith(marker + " end "):
            _, _, n, status = line.split()
            n, status = int(n), int(status)
            seen.add(n)
            while out and not out[-1].strip():
                out.pop()
            c = todo[n]
            if c is None:
                if status != 0:
                    print("%s: a set-up block failed (exit status %d):\n%s" % (path, status, "\n".join(out)),
                          file=sys.stderr)
                    ok = False
            else:
                c.actual = [l.rstrip() for l in out]
                c.actual_status = status
            current = None
            continue
        if current is not None:
            out.append(line)
    if len(seen) != len(todo):
        print("%s: the session ended after %d of %d steps (exit status %d); last output:\n%s"
              % (path, len(seen), len(todo), proc.returncode, "\n".join(out[-20:])), file=sys.stderr)
        ok = False
    return ok


def shlex_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def main():
    ap = argparse.ArgumentParser(description="Run and check the shell examples of Markdown files.")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--heavy", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directories")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.build, "bin", "moe-sim")):
        print("doc-examples: %s/bin/moe-sim not found: build first (make build)" % args.build, file=sys.stderr)
        return 2
    top = tempfile.mkdtemp(prefix="doc-examples-")
    failed = updated = total = skipped = unreached = 0
    for path in args.files:
        lines, blocks = parse(path)
        workdir = make_workdir(os.path.join(top, os.path.basename(path).replace(".", "_")), args.build)
        if not run_file(path, blocks, args.build, args.heavy, workdir):
            failed += 1
        edits = []
        for b in blocks:
            new_body = []
            changed = False
            for c in b.commands:
                if not b.output_only:
                    new_body.append(b.indent + "$ " + c.text)
                if c.actual is None:
                    # Heavy and not asked for, or after the step where the session ended (run_file failed it).
                    if c.heavy and not args.heavy:
                        skipped += 1
                    else:
                        unreached += 1
                    new_body.extend(b.indent + l if l else l for l in documented(c))
                    continue
                total += 1
                good = c.actual_status == c.status and align(c.expected, c.actual) is not None
                if good:
                    new_body.extend(b.indent + l if l else l for l in documented(c))
                    continue
                if args.update:
                    changed = True
                    updated += 1
                    new_body.extend(b.indent + l if l else l for l in rebaseline(c))
                else:
                    failed += 1
                    want = c.expected + ["(exit status %d)" % c.status]
                    got = c.actual + ["(exit status %d)" % c.actual_status]
                    what = "the program run by '%s'" % c.text.rsplit(" ", 1)[0] if c.program is not None else "$ " + c.text
                    print("FAILED %s:%d: %s" % (shown(path), c.line, what), file=sys.stderr)
                    for d in difflib.unified_diff(want, got, "documented", "real", lineterm="", n=2):
                        print("  " + d, file=sys.stderr)
            if changed:
                edits.append((b.start + 1, b.end, new_body))
        if edits:
            for start, end, body in reversed(edits):
                lines[start:end] = body
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
            print("doc-examples: updated %s" % shown(path))
    if args.keep:
        print("doc-examples: work directories kept in %s" % top)
    else:
        shutil.rmtree(top, ignore_errors=True)
    print("doc-examples: %d examples run, %d updated, %d heavy ones skipped, %d failed%s"
          % (total, updated, skipped, failed, ", %d not reached" % unreached if unreached else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
