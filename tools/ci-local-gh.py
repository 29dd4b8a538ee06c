#!/usr/bin/env python3
"""GitHub's `gh` as the runner stand-in of tools/ci-local.sh has it: what a workflow would send to
GitHub (an issue, a comment, a label), recorded instead of sent, for the scenario to check.

Every call is a JSON line in $CI_LOCAL_GITHUB/calls.jsonl (/srv/github, a folder of the scenario
mounted into the job containers): the argv, and the text of any file it names as a body
(`--body-file F`, `-F body=@F`). Answers: no open issues (`issue list`), a made-up URL for a new
issue, `{}` for anything else. Standard library only: the stand-in image has python3 alone.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def bodies(argv: list[str]) -> dict[str, str]:
    out = {}
    for i, arg in enumerate(argv):
        name = None
        if arg == "--body-file" and i + 1 < len(argv):
            name = argv[i + 1]
        elif arg.startswith("body=@"):
            name = arg.removeprefix("body=@")
        if name is not None and Path(name).is_file():
            out[name] = Path(name).read_text(errors="replace")
    return out


def main(argv: list[str]) -> int:
    folder = Path(os.environ.get("CI_LOCAL_GITHUB", "/srv/github"))
    record = {"argv": argv, "bodies": bodies(argv), "repository": os.environ.get("GITHUB_REPOSITORY")}
    with (folder / "calls.jsonl").open("a") as calls:
        calls.write(json.dumps(record) + "\n")
    if argv[:2] == ["issue", "list"]:
        print("[]")
    elif argv[:2] == ["issue", "create"]:
        print("https://github.com/example/repository/issues/1")
    elif argv[:1] == ["api"]:
        print("{}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
