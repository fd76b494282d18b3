"""Spark session factory for PAN's offline jobs.

One place decides how Spark starts: embedded ``local[*]`` unless a master URL
is given, no web UI, quiet logs, a driver heap sized to the machine, and a
clear error when Java is missing or older than Spark 4 needs (17).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIN_JAVA = 17
_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


class SparkUnavailable(RuntimeError):
    """Spark cannot start here (no pyspark, no Java, or Java too old)."""


def java_binary() -> str | None:
    """The java that PySpark will launch: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def java_major_version(java: str) -> int | None:
    """Major version from ``java -version`` (1.8 -> 8, 17.0.2 -> 17)."""
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java() -> int:
    """Fail with a clear message unless a Java >= 17 is available."""
    java = java_binary()
    if java is None:
        raise SparkUnavailable(
            f"Spark needs Java {MIN_JAVA}+, but no java was found (install openjdk-{MIN_JAVA}-jre-headless "
            "or set JAVA_HOME)"
        )
    version = java_major_version(java)
    if version is None or version < MIN_JAVA:
        raise SparkUnavailable(f"Spark needs Java {MIN_JAVA}+, but {java} is version {version or 'unknown'}")
    return version


def default_driver_memory() -> str:
    """A quarter of physical memory, between 1 and 8 GB: enough to sort without starving the OS."""
    try:
        import psutil

        total_gb = psutil.virtual_memory().total / 2**30
    except Exception:
        total_gb = 4.0
    return f"{max(1, min(8, int(total_gb // 4)))}g"


def _log_config() -> str:
    fd, path = tempfile.mkstemp(prefix="pan-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as f:
        f.write(_LOG4J)
    atexit.register(lambda: os.path.exists(path) and os.remove(path))
    return path


def get_session(master: str | None = None, app_name: str = "pan", driver_memory: str | None = None,
                config: dict[str, str] | None = None) -> SparkSession:
    """Start (or reuse) a SparkSession; ``master`` defaults to embedded ``local[*]``."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable("pyspark is not installed: install PAN with the spark extra "
                               "(pip install 'pan[spark]')") from exc
    check_java()

    master = master or "local[*]"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory or default_driver_memory())
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_log_config()}")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
