"""Runs the unittest suites in this directory (test_*.py). Fails if any test fails or if no test ran at all (e.g.
every test skipped or none discovered), so a broken discovery cannot pass silently.

Usage: PYTHONPATH=build/python python3 tests/python/run_tests.py [tests/python]
"""
import os
import sys
import unittest


def main():
    start = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    suite = unittest.defaultTestLoader.discover(start, pattern="test_*.py", top_level_dir=start)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    executed = result.testsRun - len(result.skipped)
    print("run_tests: %d run, %d skipped, %d executed, %d failures, %d errors"
          % (result.testsRun, len(result.skipped), executed, len(result.failures), len(result.errors)))
    if executed <= 0:
        print("run_tests: FAILED: no test was executed")
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
