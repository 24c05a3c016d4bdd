"""Where Spark's launchers come from on this machine: the SPARK_HOME that sessions and the
standalone cluster (oncelog.local.spark_cluster) start Spark with.

Unless the user set SPARK_HOME, it is a directory that links to the installed pyspark's
`bin`, `jars` and `sbin` but has no `python/lib/pyspark.zip`. Spark puts that zip first on
every Python worker's path, and modules imported from a zip are compiled from source each
time (no bytecode cache): 0.7-0.9 s per worker process here, against 0.13 s for the same
modules from site-packages, and Spark starts several workers per micro-batch for Python
data sources. The code is the same pyspark either way.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

SPARK_HOME_LINKS = ("bin", "jars", "sbin")


def spark_home() -> str:
    """The SPARK_HOME for sessions and clusters started from here: the user's, if set,
    else a zip-free view of the installed pyspark (see the module docstring), made once
    per pyspark installation. Sets SPARK_HOME in this process's environment."""
    configured = os.environ.get("SPARK_HOME")
    if configured:
        return configured
    import pyspark

    installed = Path(pyspark.__file__).resolve().parent
    tag = hashlib.sha256(str(installed).encode()).hexdigest()[:10]
    name = f"spark-home-{pyspark.__version__}-{tag}"
    for parent in (Path(sys.prefix) / "share" / "oncelog", Path(tempfile.gettempdir()) / f"oncelog-{os.getuid()}"):
        home = parent / name
        try:
            if not home.is_dir():
                _link_spark_home(installed, home)
        except OSError:
            continue  # not writable: try the next place
        os.environ["SPARK_HOME"] = str(home)
        return str(home)
    return str(installed)  # nowhere to write: pyspark's own directory works, only slower


def _link_spark_home(installed: Path, home: Path) -> None:
    """Build the view in a temporary directory and rename it into place, so processes
    starting at the same time never see half of it."""
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would hide it from other users of the venv
    for name in SPARK_HOME_LINKS:
        if (installed / name).exists():
            (staging / name).symlink_to(installed / name)
    try:
        staging.rename(home)
    except OSError:
        if not home.is_dir():
            raise
        for link in staging.iterdir():  # another process won the race
            link.unlink()
        staging.rmdir()
