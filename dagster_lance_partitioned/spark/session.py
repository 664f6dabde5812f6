"""The Spark session helpers the DataFrame functions share: the active session of the calling
thread, and Spark Connect or classic."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pyspark.sql import DataFrame, SparkSession


def activate(spark: SparkSession) -> None:
    """Make ``spark`` the JVM's active session in the calling thread: Spark resolves Python data
    sources of a write through the thread's active session, which a thread other than the one
    that created the session does not have (a Dagster op run in a thread pool)."""
    jvm = getattr(spark, "_jvm", None)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is not None and jsession is not None:  # not with Spark Connect
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)


def is_connect(obj: Any) -> bool:
    """Whether ``obj`` (a session or DataFrame) is Spark Connect's."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def functions_of(df: DataFrame | None) -> ModuleType:
    """The Spark functions module of ``df``'s kind (Connect or classic): a process may hold
    sessions of both, and their columns do not mix."""
    if df is not None and is_connect(df):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions
