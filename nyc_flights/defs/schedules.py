"""The example's jobs and schedules: every morning yesterday's flights of the three airports in
one run (one manifest commit; the downstream assets follow by automation once
``default_automation_condition_sensor`` runs), every hour the weather of the hour that just ended.
Both skip times outside 2013, the data's year, and start stopped."""

import datetime as dt

import dagster as dg

from nyc_flights.partitions import ORIGINS, TZ, daily, hourly

flights_job = dg.define_asset_job("flights_job", selection=["flights"])
weather_job = dg.define_asset_job("weather_job", selection=["weather"])


@dg.schedule(job=flights_job, cron_schedule="0 5 * * *", execution_timezone=TZ)
def daily_flights_schedule(context: dg.ScheduleEvaluationContext):
    """Every morning: yesterday's flights of all three airports, in one run (one manifest
    commit; downstream assets follow by automation). Skips days outside the 2013 data."""
    yesterday = (context.scheduled_execution_time - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    if not daily.has_partition_key(yesterday):
        return dg.SkipReason(f"{yesterday} is outside the flights partitions (2013)")
    first, last = (
        str(dg.MultiPartitionKey({"date": yesterday, "origin": o})) for o in ORIGINS[::2]
    )
    return dg.RunRequest(
        run_key=yesterday,
        tags={
            "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last,
        },
    )


@dg.schedule(job=weather_job, cron_schedule="5 * * * *", execution_timezone=TZ)
def weather_schedule(context: dg.ScheduleEvaluationContext):
    """Every hour: the hour that just ended. Skips hours outside the 2013 data."""
    ended = context.scheduled_execution_time - dt.timedelta(hours=1)
    key = hourly.get_partition_key_for_timestamp(ended.timestamp())
    if not hourly.has_partition_key(key):
        return dg.SkipReason(f"{key} is outside the weather partitions (2013)")
    return dg.RunRequest(run_key=key, partition_key=key)
