"""One local Spark for every Spark test.

The tests here skip, with the reason, only where pyspark, pyarrow or Java is missing; CI installs all
three, so there they run. Settings keep a 2-core machine quick: local[2], two shuffle partitions, no
UI, C1-only JIT (about 25 % faster start), UTC session time zone."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

# CI sets LOGSTORE_REQUIRE_SPARK=1: there a missing piece is a failure, never a quiet skip.
_REQUIRED = os.environ.get("LOGSTORE_REQUIRE_SPARK") == "1"
for _module in ("pyspark", "pyarrow"):
    try:
        __import__(_module)
    except ImportError:
        if _REQUIRED:
            raise
        pytest.skip(f"{_module} is not installed (pip install 'logstore[spark]')", allow_module_level=True)
if shutil.which("java") is None:
    if _REQUIRED:
        raise RuntimeError("LOGSTORE_REQUIRE_SPARK=1 but there is no java on PATH")
    pytest.skip("no Java on PATH: Spark needs a JRE (apt-get install openjdk-17-jre-headless)",
                allow_module_level=True)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/spark/jvm/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    # Workers must run this interpreter (its site-packages hold logstore and pyarrow).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The JVM, and the Python workers it starts (``python -m``, so their cwd is on sys.path), run
    # outside the repository: format("logstore") must then be found through the installed
    # pyspark_logstore module, as on a user's machine, not through the checkout.
    import pkgutil

    if "pyspark_logstore" not in {module.name for module in pkgutil.iter_modules()}:
        pytest.fail("Spark cannot discover the installed module pyspark_logstore (an editable install's import "
                    "hooks hide it): install the project as the README says, pip install '.[test,spark]'")
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("spark-cwd"))
    try:
        session = _start()
    finally:
        os.chdir(cwd)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _start():
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName("logstore-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
