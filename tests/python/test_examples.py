"""The examples quoted in docs/embedding.md stay runnable."""
import contextlib
import io
import os
import runpy
import unittest

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))


class ExamplesTest(unittest.TestCase):
    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_swap_example(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            runpy.run_path(os.path.join(HERE, "example_torch_swap.py"), run_name="__main__")
        text = out.getvalue()
        self.assertIn("same greedy tokens: True", text)
        self.assertIn("layer 0 MoE output of sequence 1, alone vs in the batch, bitwise equal: True", text)
        self.assertIn("layer 1 MoE output of sequence 1, alone vs in the batch, bitwise equal: True", text)
        self.assertNotIn("bitwise equal: False", text)


if __name__ == "__main__":
    unittest.main()
