"""Python started as the VM starts the guest agent (host/vm/vng.guest_agent_command): `-S -P`,
and only the folder of the iomatrix package on PYTHONPATH, so a module the guest may not import
(a library of the virtualenv) fails as it would there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from iomatrix.host.vm import vng


def guest_python(*args: str) -> subprocess.CompletedProcess[str]:
    command = vng.guest_agent_command()
    # env PYTHONPATH=<the folder of the package> python -S -P, as the guest runs it (there the
    # folder is the one the package is lent at, and python its root's).
    assert command[3:5] == ["-S", "-P"]
    env = ["env", f"PYTHONPATH={Path(vng.package_dir()).parent}"]
    return subprocess.run(
        [*env, sys.executable, *command[3:5], *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
