"""The example's partitions: New York days, hours and months of 2013 (the data's year), and
days x origin airports for the flights."""

import dagster as dg

TZ = "America/New_York"
ORIGINS = ["EWR", "JFK", "LGA"]
daily = dg.DailyPartitionsDefinition(start_date="2013-01-01", end_date="2014-01-01", timezone=TZ)
hourly = dg.HourlyPartitionsDefinition(
    start_date="2013-01-01-00:00", end_date="2014-01-01-00:00", timezone=TZ
)
monthly = dg.MonthlyPartitionsDefinition(
    start_date="2013-01-01", end_date="2014-01-01", timezone=TZ
)
daily_by_origin = dg.MultiPartitionsDefinition(
    {"date": daily, "origin": dg.StaticPartitionsDefinition(ORIGINS)}
)
