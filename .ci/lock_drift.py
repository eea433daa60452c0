"""Which installed packages differ from uv.lock: ``python .ci/lock_drift.py uv.lock``.

Reads the lock's packages (for this interpreter and platform: a universal lock may pin two
versions of one package under markers) and prints, for each installed distribution whose
version is not the one the lock would install here, ``name locked -> installed``. Used by
``make test-latest``; the lock is TOML, read with the standard library.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import tomllib

from packaging.markers import Marker
from packaging.utils import canonicalize_name


def locked_versions(lock: dict, extra: str | None) -> dict[str, set[str]]:
    """Each locked package's versions whose markers hold on this interpreter."""
    env = {"extra": extra or ""}
    out: dict[str, set[str]] = {}
    markers: dict[tuple[str, str], list[str]] = {}
    # A package's markers are on the edges that depend on it; a version reached by no edge
    # whose marker holds here is for another interpreter.
    for package in lock.get("package", []):
        for dep in package.get("dependencies", []) + [
            d for ds in package.get("optional-dependencies", {}).values() for d in ds
        ]:
            key = (dep["name"], dep.get("version"))
            markers.setdefault(key, []).append(dep.get("marker", ""))
    for package in lock.get("package", []):
        name = canonicalize_name(package["name"])
        version = package.get("version", "")
        edges = markers.get((package["name"], version), []) + markers.get(
            (package["name"], None), []
        )
        if edges and not any(not m or Marker(m).evaluate(env) for m in edges):
            continue
        out.setdefault(name, set()).add(version)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock")
    parser.add_argument("--extra", default=None)
    args = parser.parse_args(argv)
    with open(args.lock, "rb") as f:
        locked = locked_versions(tomllib.load(f), args.extra)
    moved = []
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name == "ember":
            continue
        want = locked.get(name)
        if want is None:
            moved.append(f"  {name}: not in the lock -> {dist.version}")
        elif dist.version not in want:
            moved.append(f"  {name}: {' or '.join(sorted(want))} -> {dist.version}")
    missing = sorted(
        set(locked)
        - {canonicalize_name(d.metadata["Name"]) for d in importlib.metadata.distributions()}
        - {"ember"}
    )
    print(
        f"{len(moved)} packages moved from uv.lock:" if moved else "no package moved from uv.lock"
    )
    print("\n".join(sorted(moved)))
    if missing:
        print(f"(locked but not installed here: {', '.join(missing)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
