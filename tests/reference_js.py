"""The reference platform's own JavaScript libraries as the tests' real clients.

`node_modules()` installs them with npm (pinned versions, from the npm registry) into a folder
of the user's cache (not the session's temporary folder, which goes with the session), once per
machine and set of versions: later runs download nothing, and a second test, or the other pytest-xdist
worker, waits on a lock and reuses it. `node(script, stdin)` runs a script there with Node.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from pathlib import Path

PACKAGES = {"@tryghost/members-csv": "2.0.7", "@tryghost/string": "0.3.7", "@tryghost/nql-lang": "0.7.0",
            "@tryghost/kg-lexical-html-renderer": "1.4.5", "@tryghost/kg-default-nodes": "2.1.5",
            "@tryghost/kg-mobiledoc-html-renderer": "7.2.3", "@tryghost/kg-default-cards": "10.3.6"}


def node_modules() -> Path:
    """The folder holding node_modules with PACKAGES installed."""
    key = hashlib.sha256(json.dumps(PACKAGES, sort_keys=True).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "pressroom" / f"reference-js-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "installed").exists():
            (folder / "package.json").write_text(json.dumps({"name": "reference-js", "private": True}))
            subprocess.run(["npm", "install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error",
                            *[f"{name}@{version}" for name, version in PACKAGES.items()]],
                           cwd=folder, check=True, capture_output=True, timeout=600)
            (folder / "installed").write_text("ok")
    return folder


def node(script: str, stdin: str = "", *args: str) -> str:
    """Run `script` (JavaScript) with the libraries installed; its stdout. A failure raises with its stderr."""
    folder = node_modules()
    done = subprocess.run(["node", "-e", script, "--", *args], cwd=folder, input=stdin, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"node failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout
