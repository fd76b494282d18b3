"""Spark session factory for PAN's offline jobs.

One place decides how Spark starts: embedded ``local[*]`` unless a master URL
is given, no web UI, quiet logs, a driver heap sized to the machine, and a
clear error when Java is missing or older than Spark 4 needs (17); and how a
job stops when it is interrupted (``stoppable``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from types import FrameType
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
    logging.getLogger("py4j").setLevel(logging.WARNING)  # not a line per connection it opens and closes
    return spark


def _not_from_py4j(record: logging.LogRecord) -> bool:
    return "py4j" not in record.pathname


def interrupt(signum: int, frame: FrameType | None) -> None:
    """A signal handler that turns SIGTERM (or SIGINT) into KeyboardInterrupt, quietly for py4j."""
    # py4j's connection is cut mid-read: what it logs about that (on its own loggers and on the root one) is
    # the interruption, not an error to show
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    logging.getLogger().addFilter(_not_from_py4j)
    raise KeyboardInterrupt


@contextlib.contextmanager
def stoppable(spark: SparkSession, wait_s: float = 60.0) -> Iterator[None]:
    """Ctrl-C or SIGTERM while Spark works stops its JVM and raises KeyboardInterrupt, without tracebacks.

    PySpark's own SIGINT handler cancels the jobs through py4j from inside the
    handler, while the main thread is blocked reading py4j's socket: py4j then
    prints a "reentrant call" traceback per connection, and every killed task a
    Java one. Here the handler only raises; the JVM is then told to log
    nothing more, terminated (its shutdown hooks remove its temporary folders)
    and waited for, so the caller can clean up its own output knowing that
    nothing writes to it any more.
    """
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        jvm = getattr(spark.sparkContext._gateway, "proc", None)
        if jvm is not None and jvm.poll() is None:
            with contextlib.suppress(Exception):  # the aborted jobs' errors are the interruption's, not news
                spark.sparkContext.setLogLevel("OFF")
            jvm.terminate()
            try:
                jvm.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                jvm.kill()
                jvm.wait()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
