"""How the parallel workers share the tests: which tests go together, and in what order.

pytest-xdist hands out work units as workers free up, each unit run by one worker (its
servers and agents shared by its tests). A unit is a test file (``--dist loadfile``), except
that a file of many independent tests that share no server (``SPLIT``: the schemathesis run,
in process) is cut into a few units of its own, so that one long file does not set the
length of the whole run.

The units go longest first: by default pytest-xdist hands out the files with the most tests
first, which leaves the few long files of one or two tests (a browser's whole flow, a
database outage) for last, run alone while the other workers wait. Longest first (``--no-
loadscope-reorder`` keeps the order the suite was collected in, which ``order`` sets), the
last units handed out are short ones. ``durations.json`` holds each file's seconds in a
parallel run (``python -m tests.schedule JUNIT_XML`` rewrites it from a run's ``--junitxml``
report); a file it does not name yet counts as the median. A file's tests keep their order.
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

TABLE = Path(__file__).with_name("durations.json")
SPLIT = {"tests/api/test_schemathesis.py": 4}  # file: units it is cut into


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def order(nodeids: list[str]) -> list[int]:
    """The indexes of ``nodeids`` in the order to run them: files longest first, each file's
    tests in their own order."""
    seconds: dict[str, float] = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    unknown = statistics.median(seconds.values()) if seconds else 0.0
    first = {f: i for i, f in reversed(list(enumerate(map(_file, nodeids))))}
    return sorted(range(len(nodeids)), key=lambda i: (
        -seconds.get(_file(nodeids[i]), unknown), first[_file(nodeids[i])], i))


class Units(LoadFileScheduling):  # type: ignore[misc]
    """``--dist loadfile``, with the files of ``SPLIT`` cut into units by their tests' ids."""

    def _split_scope(self, nodeid: str) -> str:
        file = _file(nodeid)
        parts = SPLIT.get(file)
        if parts is None:
            return file
        return f"{file}#{zlib.crc32(nodeid.encode()) % parts}"


def scheduler(config: Any, log: Any) -> Units | None:
    return Units(config, log) if config.getvalue("dist") == "loadfile" else None


def main(report: str) -> None:
    took: defaultdict[str, float] = defaultdict(float)
    for case in ET.parse(report).iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        # (a test class's name is the last part of classname: not a file)
        while path and not Path(path + ".py").exists():
            path = path.rpartition("/")[0]
        if path:
            took[path + ".py"] += float(case.get("time", "0"))
    TABLE.write_text(json.dumps({f: round(s, 1) for f, s in sorted(took.items())},
                                indent=0) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
