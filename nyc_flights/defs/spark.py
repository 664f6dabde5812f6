"""The Spark session the example's assets compute in (``DLP_SPARK_MASTER``)."""

import dagster as dg

from nyc_flights.settings import spark_resource


@dg.definitions
def spark() -> dg.Definitions:
    """The ``pyspark`` resource."""
    return dg.Definitions(resources={"pyspark": spark_resource()})
