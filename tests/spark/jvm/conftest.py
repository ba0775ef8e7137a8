"""One local Spark for every Spark test.

The tests here skip, with the reason and the install command, only where pyspark, pyarrow or Java is
missing (``external_tools``: pyspark and pyarrow for the whole folder, whose modules import them;
Java per test); CI installs all three and sets LOGSTORE_REQUIRE_TOOLS=all, so there they run and a
missing piece fails. Settings keep a 2-core machine quick: local[2], two shuffle partitions, no UI,
C1-only JIT (about 25 % faster start), UTC session time zone."""

from __future__ import annotations

import os
import sys

import pytest

import external_tools

if not external_tools.available("pyspark"):
    if external_tools.required("pyspark"):
        raise RuntimeError(f"{external_tools.reason('pyspark')}, and LOGSTORE_REQUIRE_TOOLS (or "
                           "LOGSTORE_REQUIRE_SPARK) requires it")
    pytest.skip(external_tools.reason("pyspark"), allow_module_level=True)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/spark/jvm/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.needs_tools("java"))


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
