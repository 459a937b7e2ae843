#!/usr/bin/env python3
"""The doc-example runner (scripts/doc-examples.py) itself: a matching document passes, a changed output, a changed
exit status or a failing set-up fails with the file, the line and a diff, placeholders and cuts match only what
they document, --update re-baselines, and a real document (README.md) with one digit of its output changed fails.

Usage: doc_examples_test.py BUILD_DIR   (BUILD_DIR/bin/moe-sim must exist: the README example runs it)
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, "scripts", "doc-examples.py")
BUILD = None
FENCE = "```"


def run(*files, update=False):
    args = [sys.executable, RUNNER, "--build", BUILD] + (["--update"] if update else []) + list(files)
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


class DocExamples(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="doc-examples-test-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def doc(self, text, name="doc.md"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text.replace("~~~", FENCE))
        return path

    def test_matching_document_passes(self):
        path = self.doc("""# A document
<!-- doc-examples: setup
printf 'a\\nb\\nc\\nd\\n' > lines.txt
-->
~~~
$ cat lines.txt
a
...
d
$ echo "took 12.5 s on $(hostname)"
took {{time}} s on {{any}}
$ echo 'a long line that the document cuts short'
a long line...
$ sh -c 'echo refused >&2; exit 3'
refused
(exit status 3)
~~~
Not an example (a language tag):
~~~sh
$ false
~~~
""")
        status, out, err = run(path)
        self.assertEqual(status, 0, err)
        self.assertIn("4 examples run, 0 updated, 0 heavy ones skipped, 0 failed", out)

    def test_changed_output_fails_with_its_line_and_a_diff(self):
        path = self.doc("text\n\n~~~\n$ echo 1.2345\n1.2346\n~~~\n")
        status, _, err = run(path)
        self.assertEqual(status, 1)
        self.assertIn("FAILED %s:4: $ echo 1.2345" % path, err)
        self.assertIn("-1.2346", err)
        self.assertIn("+1.2345", err)

    def test_changed_exit_status_fails(self):
        path = self.doc("~~~\n$ sh -c 'echo x; exit 1'\nx\n~~~\n")
        status, _, err = run(path)
        self.assertEqual(status, 1)
        self.assertIn("+(exit status 1)", err)

    def test_placeholders_match_only_their_kind(self):
        # {{time}} is a number; {{any}} stays within its line; a cut line is a prefix, not a substring.
        for body in ("$ echo 'took fast s'\ntook {{time}} s\n", "$ printf 'x\\ny\\n'\n{{any}}\n",
                     "$ echo 'xa long line'\na long...\n"):
            path = self.doc("~~~\n" + body + "~~~\n")
            status, _, err = run(path)
            self.assertEqual(status, 1, body)

    def test_a_program_and_its_output_block(self):
        text = "<!-- doc-examples: run %s -->\n~~~python\nprint(6 * 7)\n~~~\n\n~~~\n%s\n~~~\n"
        status, out, err = run(self.doc(text % (sys.executable, "42")))
        self.assertEqual(status, 0, err)
        self.assertIn("1 examples run", out)
        status, _, err = run(self.doc(text % (sys.executable, "43")))
        self.assertEqual(status, 1)
        self.assertIn("doc.md:2: the program run by '%s'" % sys.executable, err)
        self.assertIn("+42", err)

    def test_failing_setup_fails(self):
        path = self.doc("<!-- doc-examples: setup\nfalse\n-->\n~~~\n$ echo ok\nok\n~~~\n")
        status, _, err = run(path)
        self.assertEqual(status, 1)
        self.assertIn("a set-up block failed", err)

    def test_a_session_that_ends_early_fails_and_counts_the_rest_unreached(self):
        path = self.doc("~~~\n$ echo one\none\n$ exit 5\n$ echo two\ntwo\n~~~\n")
        status, out, err = run(path)
        self.assertEqual(status, 1)
        self.assertIn("the session ended after 1 of 3 steps", err)
        self.assertIn("1 examples run, 0 updated, 0 heavy ones skipped, 1 failed, 2 not reached", out)

    def test_update_rebaselines_and_keeps_placeholders(self):
        path = self.doc("~~~\n$ echo 'took 3 s, 7 rows'\ntook {{time}} s, 6 rows\n~~~\n")
        status, out, _ = run(path, update=True)
        self.assertEqual(status, 0)
        with open(path) as f:
            self.assertIn("took {{time}} s, 7 rows\n", f.read())
        status, _, err = run(path)
        self.assertEqual(status, 0, err)

    def test_a_real_document_with_one_digit_changed_fails(self):
        # README.md's probe table: every example passes as committed (ctest doc_examples_readme); here one digit
        # of a displacement is changed, and the runner must catch it.
        with open(os.path.join(ROOT, "README.md")) as f:
            text = f.read()
        good = "greedy      batch   arrival  1.25        0.1810"
        self.assertIn(good, text)
        path = self.doc(text.replace(good, good[:-1] + "1"), name="README.md")
        status, _, err = run(path)
        self.assertEqual(status, 1)
        self.assertIn("$ build/bin/moe-sim probe", err)
        self.assertIn("+" + good, err)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    BUILD = os.path.abspath(sys.argv.pop(1))
    unittest.main()
