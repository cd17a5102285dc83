"""docs/testing.md's tests run as a user's project would run them: pytest collects the page's
code (tests/test_docs.py only imports it, and cannot give its tests their fixtures)."""

from __future__ import annotations

import re

import pytest

from tests.test_docs import ROOT, as_module

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.crash

PAGE = ROOT / "docs" / "testing.md"


def test_the_testing_page_passes_under_pytest(pytester: pytest.Pytester) -> None:
    code = as_module(PAGE)
    tests = re.findall(r"^def (test_\w+)\(", code, flags=re.MULTILINE)
    assert len(tests) >= 5, tests
    pytester.makepyfile(test_testing_page=code)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=len(tests))
    result.stdout.fnmatch_lines(["*test_order_survives_every_crash PASSED*"])
